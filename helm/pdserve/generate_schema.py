"""Regenerate the `pdserve` part of values.schema.json from pdserve's pydantic config.

values.schema.json has two owners: the chart's own keys (hand-written; their definitions are
named `chart*`) and the `pdserve:` key, which is exactly `PdserveConfig.model_json_schema()`
(its nested models live in `definitions`). Run after changing the config
(pdserve/config.py, pool_config.py, router_config.py):

    .venv/bin/python helm/pdserve/generate_schema.py          # rewrite the file
    .venv/bin/python helm/pdserve/generate_schema.py --check  # exit 1 if it is stale

Draft-07 with `definitions` (not `$defs`) so that every Helm 3.x/4.x schema validator reads it.
The chart tests run the same comparison.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

SCHEMA_PATH = pathlib.Path(__file__).resolve().parent / "values.schema.json"
CHART_DEF_PREFIX = "chart"


def pdserve_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """(schema of the `pdserve` key, its nested definitions) from pydantic."""
    from pdserve.config import PdserveConfig

    schema = PdserveConfig.model_json_schema(ref_template="#/definitions/{model}")
    defs = schema.pop("$defs", {})
    clash = [name for name in defs if name.startswith(CHART_DEF_PREFIX)]
    if clash:
        raise SystemExit(f"pydantic model names clash with the chart's definitions: {clash}")
    return schema, defs


def regenerate(current: dict[str, Any]) -> dict[str, Any]:
    """`current` with its pdserve schema and pdserve definitions replaced by fresh ones."""
    schema, defs = pdserve_schema()
    out = dict(current)
    out["properties"] = {**current["properties"], "pdserve": schema}
    chart_defs = {
        name: value
        for name, value in current.get("definitions", {}).items()
        if name.startswith(CHART_DEF_PREFIX)
    }
    out["definitions"] = {**chart_defs, **dict(sorted(defs.items()))}
    return out


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args()
    current_text = SCHEMA_PATH.read_text()
    fresh_text = render(regenerate(json.loads(current_text)))
    if args.check:
        if fresh_text != current_text:
            print(f"{SCHEMA_PATH} is stale: run {__file__}", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(fresh_text)
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
