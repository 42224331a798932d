"""Put fitted coefficients at `router.routing.cost_model` of a config file's text (pure, but
`write_atomic`).

The edit is textual so that comments and layout survive: an existing `cost_model:` block
under `router:` / `routing:` is replaced; a missing one (or missing `routing:` / `router:`) is
inserted at the end of its parent block. The result is then loaded and compared with the
original data plus the new coefficients; when the text could not be edited (flow-style
mappings, odd layouts) or the comparison fails, the file is re-dumped from the data instead
(comments lost; `EditResult.comments_kept` says which). Either way the result is validated
with `pdserve.config.parse_config` before it is returned.
"""

from __future__ import annotations

import copy
import os
import pathlib
import re
import tempfile
from dataclasses import dataclass
from typing import Any

import yaml

from pdserve.config import ConfigError, parse_config
from pdserve.router.policy.cost_model import CostModel

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w-]*)[ \t]*:(?:[ \t]+(?P<rest>.*))?$")


class _NotEditable(Exception):
    """The text's layout is not one this module edits in place."""


@dataclass(frozen=True, slots=True)
class EditResult:
    """The new file text; `comments_kept` False when it had to be re-dumped from the data."""

    text: str
    comments_kept: bool


def format_float(value: float, digits: int = 4) -> str:
    """`value` to `digits` significant digits as a YAML 1.1 float that PyYAML loads as a
    float (it needs a '.' in the mantissa and a signed exponent): 1e-05 -> '1.0e-05',
    0 -> '0.0', 0.0213 -> '0.0213'."""
    text = f"{value:.{digits}g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        if "." not in mantissa:
            mantissa += ".0"
        return f"{mantissa}e{exponent}"
    return text if "." in text or not text.lstrip("-").isdigit() else text + ".0"


def rounded(model: CostModel, digits: int = 4) -> CostModel:
    """`model` with every coefficient rounded as `format_float` writes it."""
    values = {k: float(format_float(v, digits)) for k, v in model.model_dump().items()}
    return CostModel.model_validate(values)


def cost_model_lines(model: CostModel, step: int = 2, comment: str | None = None) -> list[str]:
    """`cost_model:` and its fields (indented by `step`), optionally a comment line first."""
    lines = ["cost_model:"]
    if comment:
        lines.append(" " * step + "# " + comment)
    lines += [f"{' ' * step}{k}: {format_float(v)}" for k, v in model.model_dump().items()]
    return lines


def snippet(model: CostModel, comment: str | None = None) -> str:
    """The YAML to paste into a config: router → routing → cost_model."""
    inner = _indented(["routing:", *_indented(cost_model_lines(model, 2, comment), 2)], 2)
    return "\n".join(["router:", *inner]) + "\n"


def update_config_text(
    text: str, model: CostModel, *, comment: str | None = None, origin: str = "config"
) -> EditResult:
    """The config `text` with `router.routing.cost_model` set to `model` (all six
    coefficients, written with `format_float`). Raises ConfigError when `text` is not a YAML
    mapping or the result does not validate."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: the top level must be a mapping")
    expected = _with_cost_model(data, model)
    try:
        new_text = _edit_text(text, model, comment)
        kept = yaml.safe_load(new_text) == expected
    except (_NotEditable, yaml.YAMLError):
        kept = False
    if not kept:
        new_text = yaml.safe_dump(expected, sort_keys=False)
    parse_config(yaml.safe_load(new_text), origin=origin)
    return EditResult(text=new_text, comments_kept=kept)


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Replace `path` with `text` atomically (temp file in the same folder, fsync, rename),
    keeping the file's permission bits."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def _with_cost_model(data: dict[str, Any], model: CostModel) -> dict[str, Any]:
    out = copy.deepcopy(data)
    router = out.get("router")
    if router is None:
        router = out["router"] = {}
    if not isinstance(router, dict):
        raise ConfigError("router must be a mapping")
    routing = router.get("routing")
    if routing is None:
        routing = router["routing"] = {}
    if not isinstance(routing, dict):
        raise ConfigError("router.routing must be a mapping")
    routing["cost_model"] = {k: float(format_float(v)) for k, v in model.model_dump().items()}
    return out


def _edit_text(text: str, model: CostModel, comment: str | None) -> str:
    lines = text.splitlines()
    step = _indent_step(lines)
    block = cost_model_lines(model, step, comment)
    top = _find_key(lines, 0, len(lines), 0, "router")
    if top is None:
        while lines and not lines[-1].strip():
            lines.pop()
        new = ["router:", *_indented(["routing:", *_indented(block, step)], step)]
        return "\n".join([*lines, *new]) + "\n"
    router_end = _block_end(lines, top)
    router_child = _child_indent(lines, top, router_end, step)
    routing = _find_key(lines, top + 1, router_end, router_child, "routing")
    if routing is None:
        new = _indented(["routing:", *_indented(block, step)], router_child)
        return _splice(lines, router_end, router_end, new)
    routing_end = _block_end(lines, routing)
    child = _child_indent(lines, routing, routing_end, step)
    found = _find_key(lines, routing + 1, routing_end, child, "cost_model", inline_ok=True)
    if found is None:
        return _splice(lines, routing_end, routing_end, _indented(block, child))
    return _splice(lines, found, _block_end(lines, found), _indented(block, child))


def _splice(lines: list[str], start: int, end: int, new: list[str]) -> str:
    return "\n".join([*lines[:start], *new, *lines[end:]]) + "\n"


def _indented(lines: list[str], n: int) -> list[str]:
    return [" " * n + line for line in lines]


def _is_content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _indent_step(lines: list[str]) -> int:
    """The file's indentation step: the indent of its first indented content line (2 if
    none)."""
    for line in lines:
        if _is_content(line) and _indent(line) > 0:
            return _indent(line)
    return 2


def _find_key(
    lines: list[str], start: int, end: int, indent: int, key: str, *, inline_ok: bool = False
) -> int | None:
    """Index of the mapping key `key:` at exactly `indent` within lines[start:end]. Raises
    _NotEditable when it has an inline value (a flow mapping, null) unless `inline_ok`."""
    for i in range(start, end):
        line = lines[i]
        if not _is_content(line) or _indent(line) != indent:
            continue
        m = _KEY.match(line)
        if m is None or m["key"] != key:
            continue
        rest = (m["rest"] or "").strip()
        if rest and not rest.startswith("#") and not inline_ok:
            raise _NotEditable(f"{key} has an inline value on line {i + 1}")
        return i
    return None


def _block_end(lines: list[str], key_line: int) -> int:
    """Index just past the last content line of the block under the key at `key_line`: the
    following lines indented deeper than it (blank and comment lines between them belong to
    it; trailing ones belong to what follows)."""
    base = _indent(lines[key_line])
    end = key_line + 1
    for i in range(key_line + 1, len(lines)):
        if _is_content(lines[i]):
            if _indent(lines[i]) <= base:
                break
            end = i + 1
    return end


def _child_indent(lines: list[str], key_line: int, end: int, step: int) -> int:
    """The indent of the block's children (the first content line under the key), or the
    key's indent plus `step` when it has none yet."""
    for i in range(key_line + 1, end):
        if _is_content(lines[i]):
            return _indent(lines[i])
    return _indent(lines[key_line]) + step
