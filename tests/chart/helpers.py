"""Chart test helpers: render, validate objects offline, read metric names out of PromQL.

Rendering and linting use helm-python-sdk (Helm's Go SDK through ctypes, no helm binary).
Core objects validate with kubernetes-validate; KubeRay and prometheus-operator objects validate
against their CRDs' openAPIV3Schema from ../shared/schemas (next to the repository).
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import yaml

from pdserve.router.metric_catalog import CATALOG, MetricSpec

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "helm" / "pdserve"
SCHEMAS_DIR = REPO_ROOT.parent / "shared" / "schemas"
RELEASE = "demo"
NAMESPACE = "llm"
KUBE_VERSION = kubernetes_validate.utils.latest_version()

CRD_FILES = {
    ("ray.io/v1", "RayService"): "ray.io_rayservices.yaml",
    ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com_podmonitors.yaml",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_servicemonitors.yaml",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_prometheusrules.yaml",
}

# Metrics the dashboard or alerts may use that pdserve's router does not export. Empty today:
# everything is built from router/metric_catalog.py. Add Ray/vLLM names here explicitly.
KNOWN_EXTERNAL_METRICS: frozenset[str] = frozenset()
# Labels Prometheus attaches to every scraped series (PodMonitor target labels).
TARGET_LABELS = frozenset({"namespace", "pod", "container", "job", "instance", "endpoint"})


# ----------------------------------------------------------------------------- rendering
def render(chart: helm_python.Chart, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every object the chart renders for `values`, parsed."""
    manifests = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    objects: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def notes(chart: helm_python.Chart, values: dict[str, Any] | None = None) -> str:
    manifests = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


def one(objects: Iterable[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def kinds(objects: Iterable[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objects)


def worker_groups(rayservice: dict[str, Any]) -> dict[str, dict[str, Any]]:
    groups = rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return {g["groupName"]: g for g in groups}


def ray_containers(rayservice: dict[str, Any]) -> list[dict[str, Any]]:
    """The Ray container (index 0, as KubeRay expects) of the head and of every worker group."""
    cluster = rayservice["spec"]["rayClusterConfig"]
    templates = [cluster["headGroupSpec"]["template"]]
    templates += [g["template"] for g in cluster["workerGroupSpecs"]]
    return [t["spec"]["containers"][0] for t in templates]


def serve_config(rayservice: dict[str, Any]) -> dict[str, Any]:
    parsed: dict[str, Any] = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
    return parsed


def plain_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's env entries that have a literal value (valueFrom ones left out)."""
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


# Ray Serve settings (ray/serve/_private/constants.py) that decide its request path.
RAY_SERVE_SETTINGS = (
    "RAY_SERVE_THROUGHPUT_OPTIMIZED",
    "RAY_SERVE_ENABLE_DIRECT_INGRESS",
    "RAY_SERVE_ENABLE_HA_PROXY",
    "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT",
    "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT",
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S",
    "RAY_SERVE_USE_GRPC_BY_DEFAULT",
    "RAY_SERVE_PROXY_USE_GRPC",
    "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD",
    "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP",
    "RAY_SERVE_LOG_TO_STDERR",
    "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE",
    "RAY_SERVE_FREEZE_GC_ON_STARTUP",
    "CONTROL_LOOP_INTERVAL_S",
)


@functools.cache
def _ray_serve_reads(env: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    code = (
        "import json\n"
        "from ray.serve._private import constants as c\n"
        f"print(json.dumps({{n: getattr(c, n) for n in {list(RAY_SERVE_SETTINGS)!r}}}))\n"
    )
    # Only `env` decides: none of this process's own RAY_SERVE_* variables leak in.
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **dict(env)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"importing Ray Serve's constants failed:\n{proc.stderr}")
    settings: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return settings


def ray_serve_reads(env: Mapping[str, str]) -> dict[str, Any]:
    """What the installed Ray Serve's constants are in a process started with `env` (a fresh
    interpreter imports ray/serve/_private/constants.py; no Ray cluster is started)."""
    return dict(_ray_serve_reads(tuple(sorted(env.items()))))


# ---------------------------------------------------------------------------- validation
def require_schemas_dir() -> pathlib.Path:
    if not SCHEMAS_DIR.is_dir():
        raise AssertionError(
            f"CRD schemas not found at {SCHEMAS_DIR}: the chart tests need the shared folder "
            "next to the repository (../shared/schemas with the KubeRay and prometheus-operator "
            "CRDs). Clone or copy it there."
        )
    return SCHEMAS_DIR


def _strict(schema: Any) -> Any:
    """A CRD schema that, like the API server with strict field validation, rejects unknown
    fields: objects with declared properties get additionalProperties: false."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def crd_validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    path = require_schemas_dir() / CRD_FILES[(api_version, kind)]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRDs are ~1 MB of YAML
    crd = yaml.load(path.read_text(), Loader=loader)
    version = api_version.split("/")[1]
    (spec,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return jsonschema.Draft7Validator(_strict(spec["schema"]["openAPIV3Schema"]))


def validate_object(obj: dict[str, Any]) -> None:
    """Raise AssertionError naming the object and the first problem, if it is not valid."""
    key = (obj["apiVersion"], obj["kind"])
    label = f"{obj['kind']}/{obj['metadata'].get('name')}"
    if key in CRD_FILES:
        errors = sorted(crd_validator(*key).iter_errors(obj), key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].path)
            raise AssertionError(f"{label} fails its CRD schema at {where}: {errors[0].message}")
        return
    try:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise AssertionError(f"{label} is invalid at {where}: {exc.message}") from exc


# ------------------------------------------------------------------------------- PromQL
_PROMQL_WORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool"}
)
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def exposed_names(spec: MetricSpec) -> set[str]:
    """Series names Prometheus sees for one catalog metric."""
    if spec.type == "counter":
        return {f"{spec.name}_total"}
    if spec.type == "histogram":
        return {f"{spec.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
    return {spec.name}


def catalog_index() -> dict[str, MetricSpec]:
    return {name: spec for spec in CATALOG for name in exposed_names(spec)}


def promql_metrics(expr: str) -> set[str]:
    """Metric names an expression selects (functions, keywords, labels and numbers left out)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = _GROUPING.sub(" ", s)
    s = re.sub(r"\$\{?\w+\}?", " ", s)
    s = re.sub(r"(?<![\w:])\d+(\.\d+)?([eE][-+]?\d+)?", " ", s)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        if s[match.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if match.group(0) not in _PROMQL_WORDS:
            names.add(match.group(0))
    return names


def promql_labels(expr: str) -> set[str]:
    """Label names an expression groups, joins or matches on."""
    labels: set[str] = set()
    for _, inner in _GROUPING.findall(expr):
        labels |= {part.strip() for part in inner.split(",") if part.strip()}
    for matcher in re.findall(r"\{([^}]*)\}", expr):
        labels |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", matcher))
    return labels


def unknown_metric_problems(expr: str) -> list[str]:
    """What is wrong with an expression's metric and label references (empty = fine)."""
    index = catalog_index()
    names = promql_metrics(expr)
    if not names:
        return [f"references no metric: {expr}"]
    problems = [
        f"{name} is neither in router/metric_catalog.py nor in KNOWN_EXTERNAL_METRICS"
        for name in sorted(names)
        if name not in index and name not in KNOWN_EXTERNAL_METRICS
    ]
    allowed = set(TARGET_LABELS) | {"le"}
    for name in names & index.keys():
        allowed |= set(index[name].labels)
    problems += [
        f"label {label!r} is not a label of {sorted(names)}"
        for label in sorted(promql_labels(expr) - allowed)
    ]
    return problems


_AGGREGATION = re.compile(r"\b(sum|max|min|avg|count)\s*(?:(?:by|without)\s*\([^)]*\)\s*)?\(")


def summed_across_routers(expr: str) -> list[str]:
    """Cluster-scope series (metric_catalog.MetricScope: every router replica exports the same
    value) that an expression sums without first taking max/min/avg over the router replicas:
    the innermost aggregation around each such reference must not be sum or count."""
    index = catalog_index()
    problems = []
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        spec = index.get(match.group(0))
        if spec is None or spec.scope != "cluster":
            continue
        depth, start = 0, match.start()
        # Walk back to the innermost unclosed "(" and the aggregation that opens it, if any.
        innermost = None
        for agg in reversed(list(_AGGREGATION.finditer(expr, 0, start))):
            inside = expr[agg.end() : start]
            depth = inside.count("(") - inside.count(")")
            if depth >= 0:
                innermost = agg.group(1)
                break
        if innermost in ("sum", "count"):
            problems.append(f"{match.group(0)} in a {innermost}() across router replicas")
    return problems
