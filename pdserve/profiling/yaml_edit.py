"""Put fitted coefficients at `router.routing.cost_model` of a config file's text (pure, but
`write_atomic`).

The file is edited with ruamel.yaml's round-trip mode, so comments, key order, quotes and the
file's indentation survive: an existing `cost_model:` block is replaced, a missing one (or a
missing `routing:` / `router:`) is added at the end of its parent mapping, and a flow-style
parent (`router: {port: 8000}`) becomes a block. Comment lines that followed the last line of
the parent (they belong to what comes next) stay after the new block. The result is loaded
with PyYAML and compared with the original data plus the new coefficients; when ruamel.yaml
cannot load the text (e.g. duplicate keys, which PyYAML accepts) or the comparison fails, the
file is re-dumped from the data instead (comments lost; `EditResult.comments_kept` says which).
Either way the result is validated with `pdserve.config.parse_config` before it is returned.
"""

from __future__ import annotations

import copy
import io
import os
import pathlib
import tempfile
from dataclasses import dataclass
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.error import YAMLError as RuamelYAMLError
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from pdserve.config import ConfigError, parse_config
from pdserve.router.policy.cost_model import CostModel

_PATH = ("router", "routing", "cost_model")
_Node = CommentedMap | CommentedSeq


class _NotEditable(Exception):
    """ruamel.yaml reads the text differently from PyYAML; re-dump from the data instead."""


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


def snippet(model: CostModel, comment: str | None = None, step: int = 2) -> str:
    """The YAML to paste into a config: router → routing → cost_model (indented by `step`)."""
    inner = _indented(["routing:", *_indented(cost_model_lines(model, step, comment), step)], step)
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
    except (_NotEditable, RuamelYAMLError, yaml.YAMLError):
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
    head, body = _split_document_start(text)
    step = _indent_step(body.splitlines())
    block = snippet(model, comment, step)
    rt = YAML()
    rt.preserve_quotes = True
    rt.width = 1 << 16  # never re-wrap long lines
    try:
        root, _, dash = load_yaml_guess_indent(body, yaml=rt)
    except IndexError as exc:  # its indentation scan trips on a bare `- ` line
        raise _NotEditable("cannot guess the sequence indentation") from exc
    if root is None:  # empty or only comments: nothing to merge into
        return head + (body.rstrip("\n") + "\n" if body.strip() else "") + block
    if not isinstance(root, CommentedMap):
        raise _NotEditable(f"top level read as {type(root).__name__}")
    # The new block, parsed from its text so the numbers keep `format_float`'s spelling.
    new = rt.load(block)
    node = root
    for key in _PATH:
        node.fa.set_block_style()
        child = node.get(key)
        if key == _PATH[-1] or not isinstance(child, CommentedMap):
            _put(node, key, new[key])
            break
        node, new = child, new[key]
    rt.indent(mapping=step, sequence=(dash or 0) + 2, offset=dash or 0)
    out = io.StringIO()
    rt.dump(root, out)
    return head + out.getvalue()


def _split_document_start(text: str) -> tuple[str, str]:
    """(everything up to a leading `---` line, the rest); ruamel.yaml drops what precedes it."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if _is_content(line):
            if line.rstrip() == "---":
                return "".join(lines[: i + 1]), "".join(lines[i + 1 :])
            break
    return "", text


def _put(node: CommentedMap, key: str, value: CommentedMap) -> None:
    """`node[key] = value`, replacing an old value and its comments; the comment lines that
    trailed the old value (or the mapping's last entry) move below `value`."""
    last = key if key in node else next(reversed(node), None)
    trailing = "" if last is None else _cut_trailing(*_last_leaf(node, last))
    if node.get(key) is not None:
        node.ca.items.pop(key, None)
    node[key] = value
    if trailing:
        owner, at, slot = _last_leaf(node, key)
        entry = owner.ca.items.setdefault(at, [None, None, None, None])
        entry[slot] = CommentToken("\n" + trailing, CommentMark(0))


def _last_leaf(node: _Node, key: Any) -> tuple[_Node, Any, int]:
    """Where ruamel.yaml keeps the comment after `node[key]`'s last line: the collection, the
    key or index, and the slot of its comment entry."""
    value = node[key]
    if isinstance(value, _Node) and value and not value.fa.flow_style():
        return _last_leaf(
            value, next(reversed(value)) if isinstance(value, dict) else len(value) - 1
        )
    return node, key, 2 if isinstance(node, CommentedMap) else 0


def _cut_trailing(node: _Node, key: Any, slot: int) -> str:
    """Remove and return the lines after the end-of-line comment at `node[key]` (blank and
    comment lines that belong to what follows)."""
    entry = node.ca.items.get(key)
    token = entry[slot] if entry else None
    if token is None:
        return ""
    eol, _, rest = token.value.partition("\n")
    if not rest:
        return ""
    if eol:
        token.value = eol + "\n"
    else:
        entry[slot] = None
    return str(rest)


def _indented(lines: list[str], n: int) -> list[str]:
    return [" " * n + line for line in lines]


def _is_content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _indent_step(lines: list[str]) -> int:
    """The file's mapping indentation step: the indent of its first indented content line
    that is not a sequence item (2 if none)."""
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        if _is_content(line) and indent > 0 and not line.lstrip().startswith("-"):
            return indent
    return 2
