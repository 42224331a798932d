"""`pdserve profile --write`: the fitted cost model edited into a config's YAML text in place
(comments kept), its float format, and the atomic write."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from pdserve.config import ConfigError, parse_config
from pdserve.profiling import yaml_edit as Y
from pdserve.router.policy.cost_model import CostModel
from tests.unit.profiling_helpers import FIT

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("value", "text"),
    [(1e-05, "1.0e-05"), (0.0, "0.0"), (0.0213, "0.0213"), (3.456789e-08, "3.457e-08"),
     (2.0, "2.0"), (12345.0, "1.234e+04"), (0.000123456, "0.0001235")],
)  # fmt: skip
def test_format_float_is_a_pyyaml_float(value: float, text: str) -> None:
    assert Y.format_float(value) == text
    assert yaml.safe_load(f"x: {text}") == {"x": float(text)}


BASE = "platform: cpu  # top comment\nmodel:\n  max_model_len_tokens: 8192\n"
CM = "".join(f"      {k}: {Y.format_float(v)}\n" for k, v in FIT.model_dump().items())
NEW_ROUTER = "router:\n  routing:\n    cost_model:\n" + CM
CASES = {
    "no router": (BASE, BASE + NEW_ROUTER),
    "router, no routing": (
        BASE + "router:\n  port: 8000  # keep\n\n# trailing\nprefill:\n  num_replicas: 2\n",
        BASE + "router:\n  port: 8000  # keep\n  routing:\n    cost_model:\n" + CM
        + "\n# trailing\nprefill:\n  num_replicas: 2\n",
    ),
    "routing, no cost_model": (
        BASE + "router:\n  routing:\n    lanes: true  # c\n  port: 8000\n",
        BASE + "router:\n  routing:\n    lanes: true  # c\n    cost_model:\n" + CM
        + "  port: 8000\n",
    ),
    "cost_model replaced": (
        BASE + "router:\n  routing:\n    cost_model:\n      # old\n      per_token_s: 1.0\n"
        "    lanes: false\n",
        BASE + "router:\n  routing:\n    cost_model:\n" + CM + "    lanes: false\n",
    ),
    "inline cost_model": (
        BASE + "router:\n  routing:\n    cost_model: {}\n",
        BASE + "router:\n  routing:\n    cost_model:\n" + CM,
    ),
    "empty routing": (
        BASE + "router:\n  routing:\nprefill: {}\n",
        BASE + "router:\n  routing:\n    cost_model:\n" + CM + "prefill: {}\n",
    ),
    "comments after a replaced block stay after it": (
        BASE + "router:\n  routing:  # r\n    cost_model:\n      per_token_s: 1.0  # old\n"
        "\n# next\nprefill: {}\n",
        BASE + "router:\n  routing:  # r\n    cost_model:\n" + CM + "\n# next\nprefill: {}\n",
    ),
    "flow-style router becomes a block": (
        BASE + "router: {port: 8000}\n",
        BASE + "router:\n  port: 8000\n  routing:\n    cost_model:\n" + CM,
    ),
    "document start and comments before it": (
        "# head\n---\n" + BASE, "# head\n---\n" + BASE + NEW_ROUTER
    ),
    "only comments": ("# nothing yet\n", "# nothing yet\n" + NEW_ROUTER),
    "4-space indent, indented sequence": (
        "prefill:\n    cpu_cores:\n        - 0  # c\n",
        "prefill:\n    cpu_cores:\n        - 0  # c\nrouter:\n    routing:\n        cost_model:\n"
        + CM.replace("      ", "            "),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_update_config_text_edits_in_place(case: str) -> None:
    before, after = CASES[case]
    result = Y.update_config_text(before, FIT)
    assert (result.text, result.comments_kept) == (after, True)
    assert Y.update_config_text(result.text, FIT).text == result.text  # idempotent


def test_update_config_text_falls_back_to_a_dump_for_duplicate_keys() -> None:
    # PyYAML takes the last of duplicate keys; ruamel.yaml refuses them: re-dump the data.
    result = Y.update_config_text("# lost\nrouter:\n  port: 8000\nrouter:\n  port: 8001\n", FIT)
    assert not result.comments_kept and "# lost" not in result.text
    data = yaml.safe_load(result.text)
    assert data["router"]["port"] == 8001
    assert parse_config(data).router.routing.cost_model == FIT


def test_update_config_text_on_the_2p1d_config_keeps_every_comment() -> None:
    text = (REPO / "deploy" / "local-2p1d.yaml").read_text()
    assert "    cost_model:\n" in text  # a fitted block already there: it is replaced
    result = Y.update_config_text(text, FIT, comment="fitted")
    assert result.comments_kept
    assert result.text.startswith(text[: text.index("    cost_model:\n")])
    cfg = parse_config(yaml.safe_load(result.text))
    assert cfg.router.routing.cost_model == FIT and cfg.router.routing.lane_max_long_backlog_s == 8
    assert "      # fitted\n" in result.text


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("- a\n", "mapping"),
        ("router: [\n", "not valid YAML"),
        ("router:\n  port: 0\n", "port"),
        ("extra:\n  - \n    1\n", "extra"),  # a bare `- ` trips ruamel's indent guess
    ],
)
def test_update_config_text_rejects(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Y.update_config_text(text, FIT)


def test_snippet_and_write_atomic(tmp_path: pathlib.Path) -> None:
    data = yaml.safe_load(Y.snippet(FIT, comment="c"))
    assert CostModel.model_validate(data["router"]["routing"]["cost_model"]) == FIT
    path = tmp_path / "c.yaml"
    path.write_text("old")
    path.chmod(0o640)
    Y.write_atomic(path, "new\n")
    assert path.read_text() == "new\n" and path.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["c.yaml"]
