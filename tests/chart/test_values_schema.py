"""Bad values are refused before anything reaches the cluster, with a message naming the key.

Two layers: values.schema.json (types, unknown keys; Helm enforces it on every render/install,
and its `pdserve` part is pdserve's pydantic schema) and render-time checks in the templates
(cross-field rules the schema cannot express).
"""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType
from typing import Any

import helm_python
import jsonschema
import pytest
import yaml

from tests.chart.helpers import CHART_DIR, RELEASE

SCHEMA_PATH = CHART_DIR / "values.schema.json"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_schema", CHART_DIR / "generate_schema.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"pdserve": {"prefill": {"num_replicas": "two"}}}, "/pdserve/prefill/num_replicas"),
        ({"pdserve": {"prefil": {}}}, "additional properties 'prefil' not allowed"),
        ({"pdserve": {"kv_transfer": {"buffer_device": "tpu"}}}, "/pdserve/kv_transfer"),
        ({"pdserve": {"decode": {"autoscaling": {"max_replicas": 0}}}}, "max_replicas"),
        ({"monitoring": {"enabled": "yes"}}, "/monitoring/enabled"),
        ({"bogus": 1}, "additional properties 'bogus' not allowed"),
        ({"prefill": {"gpusPerPod": 1.5}}, "/prefill/gpusPerPod"),
        ({"decode": {"maxReplicas": "4"}}, "/decode/maxReplicas"),
        ({"prefill": {"rayStartParams": {"resources": '{"x": 1}'}}}, "/prefill/rayStartParams"),
        ({"kvTransfer": {"rdma": {"enabled": "on"}}}, "/kvTransfer/rdma/enabled"),
        ({"service": {"type": "ExternalName"}}, "/service/type"),
        ({"apiKey": {"value": "sk-inline"}}, "additional properties 'value' not allowed"),
        ({"podSecurityContext": {"runAsUser": "1000"}}, "/podSecurityContext/runAsUser"),
        ({"securityContext": {"allowPrivilegeEscalaton": False}}, "'allowPrivilegeEscalaton'"),
        ({"securityContext": {"seccompProfile": {"type": "Default"}}}, "/securityContext"),
        ({"networkPolicy": {"enabled": "yes"}}, "/networkPolicy/enabled"),
        ({"networkPolicy": {"router": {"from": [{"podSelectr": {}}]}}}, "'podSelectr'"),
        ({"networkPolicy": {"nodeCIDRs": ["10.0.0.0"]}}, "/networkPolicy/nodeCIDRs/0"),
    ],
)
def test_schema_rejects_bad_values(
    chart: helm_python.Chart, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm_python.HelmValuesError) as caught:
        chart.render(values, name=RELEASE)
    assert message in str(caught.value)
    assert "sk-inline" not in str(caught.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"pdserve": {"router": {"host": "127.0.0.1"}}}, "set pdserve.router.host: 0.0.0.0"),
        ({"pdserve": {"router": {"port": 8080}}}, "collides with a Ray port"),
        ({"prefill": {"maxReplicas": 2}}, "the prefill worker group can hold at most 2 GPUs"),
        (
            {"pdserve": {"decode": {"num_gpus": 2, "engine": {"tensor_parallel_size": 2}}}},
            "decode.gpusPerPod (1) is less than pdserve.decode.num_gpus (2)",
        ),
        ({"decode": {"minReplicas": 5, "replicas": 5}}, "decode.minReplicas (5) must be <="),
        ({"prefill": {"replicas": 9}}, "prefill.replicas (9) must lie within"),
        ({"kvTransfer": {"ucx": {"tls": "tcp"}}}, "UCX_TLS is set in both"),
        ({"kvTransfer": {"ucx": {"env": {"UCX_TLS": "tcp"}}}}, "UCX_TLS is set in both"),
        ({"kvTransfer": {"hostNetwork": True}}, "CIDRs in networkPolicy.nodeCIDRs"),
        ({"pdserve": {"mode": "aggregated"}}, "run the aggregated baseline with `pdserve up`"),
    ],
)
def test_render_refuses_layouts_that_cannot_work(
    chart: helm_python.Chart, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm_python.HelmRenderError, match="execution error") as caught:
        chart.render(values, name=RELEASE)
    assert message in str(caught.value)


def test_a_single_ucx_tls_source_is_accepted(chart: helm_python.Chart) -> None:
    values = {
        "kvTransfer": {"ucx": {"tls": "rc,sm,cuda_copy,cuda_ipc"}},
        "pdserve": {"kv_transfer": {"ucx_env": {"UCX_TLS": None}}},
    }
    assert chart.render(values, name=RELEASE)


def test_schema_pdserve_part_is_generated_from_pydantic() -> None:
    current = json.loads(SCHEMA_PATH.read_text())
    fresh = _generator().regenerate(current)
    assert fresh["properties"]["pdserve"] == current["properties"]["pdserve"], (
        "values.schema.json is stale: run .venv/bin/python helm/pdserve/generate_schema.py"
    )
    assert fresh["definitions"] == current["definitions"], (
        "values.schema.json is stale: run .venv/bin/python helm/pdserve/generate_schema.py"
    )


def test_schema_is_closed_and_valid_draft7() -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    assert schema["properties"]["pdserve"]["additionalProperties"] is False
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(defaults)
    # Every top-level key in values.yaml is described by the schema, and vice versa.
    assert set(defaults) == set(schema["properties"])


def test_helm_enforces_the_schema_on_lint() -> None:
    report = helm_python.lint(CHART_DIR, {"monitoring": {"enabled": "yes"}})
    assert any("/monitoring/enabled" in error for error in report["errors"])
