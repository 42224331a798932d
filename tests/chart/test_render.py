"""The chart renders valid objects for every supported layout, and what it renders follows values.

Variants (tests/chart/variants.py): the default (deploy/gpu-example.yaml), 1P1D, 4P2D,
tensor-parallel prefill, RDMA with Multus or host networking, monitoring on, autoscaling off, Ray
Serve's lean path off, every router entry point on.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import helm_python
import pytest
import yaml

from pdserve.config import PdserveConfig, load_config, parse_config
from pdserve.deploy.serve_config import serve_config_for
from tests.chart.helpers import (
    CHART_DIR,
    REPO_ROOT,
    notes,
    one,
    ray_containers,
    render,
    serve_config,
    validate_object,
    worker_groups,
)
from tests.chart.variants import DECODE_TAINT, FOUR_P_TWO_D, H100, H200, IDS, RDMA, VARIANTS


def _merged(chart: helm_python.Chart, name: str) -> dict[str, Any]:
    merged: dict[str, Any] = chart.merge_values(copy.deepcopy(VARIANTS[name]))
    return merged


@pytest.mark.parametrize("name", IDS)
def test_every_rendered_object_validates(chart: helm_python.Chart, name: str) -> None:
    objects = render(chart, VARIANTS[name])
    assert objects, "nothing rendered"
    for obj in objects:
        assert obj["metadata"]["namespace"] == "llm"
        if obj["kind"] == "HTTPRoute":  # no schema at hand: check what the route needs
            (rule,) = obj["spec"]["rules"]
            assert rule["backendRefs"] == [{"name": "demo-pdserve-router", "port": 8000}]
            assert obj["spec"]["parentRefs"]
            continue
        validate_object(obj)
    # KubeRay turns spec.serveService into a core Service: validate it as one.
    rayservice = one(objects, "RayService")
    service = {"apiVersion": "v1", "kind": "Service", **rayservice["spec"]["serveService"]}
    validate_object(service)
    assert len(rayservice["metadata"]["name"]) <= 47, "KubeRay rejects longer RayService names"


@pytest.mark.parametrize("name", IDS)
def test_lints_clean(name: str) -> None:
    report = helm_python.lint(CHART_DIR, copy.deepcopy(VARIANTS[name]), strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("name", IDS)
def test_serve_config_is_serve_config_for_the_pdserve_values(
    chart: helm_python.Chart, name: str
) -> None:
    expected = serve_config_for(parse_config(_merged(chart, name)["pdserve"]))
    rendered = serve_config(one(render(chart, VARIANTS[name]), "RayService"))
    (app,) = rendered["applications"]
    (expected_app,) = expected["applications"]
    assert PdserveConfig.model_validate(app.pop("args")).model_dump(mode="json") == (
        expected_app.pop("args")
    )
    assert rendered == expected


@pytest.mark.parametrize("name", IDS)
def test_serve_config_is_accepted_by_ray_serve(chart: helm_python.Chart, name: str) -> None:
    with warnings.catch_warnings():  # Ray's pydantic-v1-style fields warn at import
        warnings.simplefilter("ignore", DeprecationWarning)
        from ray.serve.schema import ServeDeploySchema  # what KubeRay's dashboard PUT parses

    rendered = serve_config(one(render(chart, VARIANTS[name]), "RayService"))
    parsed = ServeDeploySchema.model_validate(rendered)
    assert [app.import_path for app in parsed.applications] == ["pdserve.deploy.app:build_app"]


def test_default_pdserve_values_are_the_gpu_example(chart: helm_python.Chart) -> None:
    example = REPO_ROOT / "deploy" / "gpu-example.yaml"
    assert chart.values["pdserve"] == yaml.safe_load(example.read_text())
    rendered = serve_config(one(render(chart), "RayService"))
    expected = serve_config_for(load_config(example))
    rendered["applications"][0]["args"] = PdserveConfig.model_validate(
        rendered["applications"][0]["args"]
    ).model_dump(mode="json")
    assert rendered == expected


@pytest.mark.parametrize("name", IDS)
def test_worker_groups_follow_values(chart: helm_python.Chart, name: str) -> None:
    merged = _merged(chart, name)
    rayservice = one(render(chart, VARIANTS[name]), "RayService")
    groups = worker_groups(rayservice)
    assert sorted(groups) == ["decode", "prefill"]
    args = serve_config(rayservice)["applications"][0]["args"]
    for role, group in groups.items():
        want = merged[role]
        assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (
            want["replicas"],
            want["minReplicas"],
            want["maxReplicas"],
        )
        spec = group["template"]["spec"]
        limits = spec["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == want["gpusPerPod"]
        assert spec.get("nodeSelector", {}) == want["nodeSelector"]
        assert spec.get("tolerations", []) == want["tolerations"]
        assert args[role].get("autoscaling") == merged["pdserve"][role].get("autoscaling")
    cluster = rayservice["spec"]["rayClusterConfig"]
    assert cluster["enableInTreeAutoscaling"] is merged["autoscaler"]["enabled"]
    assert ("autoscalerOptions" in cluster) is merged["autoscaler"]["enabled"]
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in head["resources"].get("limits", {})


def test_4p2d_places_and_bounds_each_tier(chart: helm_python.Chart) -> None:
    rayservice = one(render(chart, FOUR_P_TWO_D), "RayService")
    groups = worker_groups(rayservice)
    prefill, decode = groups["prefill"], groups["decode"]
    assert (prefill["minReplicas"], prefill["maxReplicas"]) == (4, 8)
    assert (decode["minReplicas"], decode["maxReplicas"]) == (2, 4)
    assert prefill["template"]["spec"]["nodeSelector"] == H100
    assert decode["template"]["spec"]["nodeSelector"] == H200
    assert decode["template"]["spec"]["tolerations"] == DECODE_TAINT
    args = serve_config(rayservice)["applications"][0]["args"]
    assert args["prefill"]["num_replicas"] == 4
    assert args["prefill"]["autoscaling"]["min_replicas"] == 4
    assert args["prefill"]["autoscaling"]["max_replicas"] == 8
    assert args["decode"]["autoscaling"]["max_replicas"] == 4
    # Each pool advertises its own custom Ray resource (in the format KubeRay and the Ray
    # autoscaler both parse), so Serve replicas can be pinned to their group.
    for role, group in groups.items():
        raw = group["rayStartParams"]["resources"]
        assert raw == f"'{{\"pdserve_{role}\":100}}'"


def test_autoscaling_off_fixes_serve_replicas(chart: helm_python.Chart) -> None:
    args = serve_config(one(render(chart, VARIANTS["autoscaling-off"]), "RayService"))
    config = PdserveConfig.model_validate(args["applications"][0]["args"])
    assert config.prefill.autoscaling is None and config.decode.autoscaling is None
    assert (config.prefill.num_replicas, config.decode.num_replicas) == (2, 1)


@pytest.mark.parametrize("port", [8000, 9000])
def test_probes_hit_ready_and_health_on_the_router_port(
    chart: helm_python.Chart, port: int
) -> None:
    values = {"pdserve": {"router": {"port": port}}}
    rayservice = one(render(chart, values), "RayService")
    head, *workers = ray_containers(rayservice)
    assert head["livenessProbe"]["httpGet"] == {"path": "/health", "port": port}
    # KubeRay deploys the Serve app only once the head is Ready: no app-level readiness there.
    assert "readinessProbe" not in head
    assert len(workers) == 2
    for worker in workers:
        assert worker["readinessProbe"]["httpGet"] == {"path": "/ready", "port": port}
    for container in (head, *workers):
        assert {"name": "serve", "containerPort": port, "protocol": "TCP"} in container["ports"]
    (svc_port,) = rayservice["spec"]["serveService"]["spec"]["ports"]
    assert (svc_port["name"], svc_port["targetPort"]) == ("serve", port)
    assert serve_config(rayservice)["http_options"] == {"host": "0.0.0.0", "port": port}


def test_api_key_comes_only_from_a_secret_reference(chart: helm_python.Chart) -> None:
    values = {"apiKey": {"existingSecret": "pdserve-api-key", "key": "token"}}
    objects = render(chart, values)
    assert "Secret" not in {o["kind"] for o in objects}
    for container in ray_containers(one(objects, "RayService")):
        (env,) = [e for e in container["env"] if e["name"] == "PDSERVE_API_KEY"]
        assert env == {
            "name": "PDSERVE_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": "pdserve-api-key", "key": "token"}},
        }
    # There is no values field for an inline key: it could only end up in plain text.
    with pytest.raises(helm_python.HelmValuesError, match="value"):
        chart.render({"apiKey": {"value": "sk-do-not-render"}}, name="demo")
    without = render(chart)
    assert all(
        "PDSERVE_API_KEY" not in {e["name"] for e in c.get("env", [])}
        for c in ray_containers(one(without, "RayService"))
    )


def test_rdma_adds_device_capability_and_networks(chart: helm_python.Chart) -> None:
    rayservice = one(render(chart, RDMA), "RayService")
    for group in worker_groups(rayservice).values():
        template = group["template"]
        assert template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net"
        container = template["spec"]["containers"][0]
        for side in ("requests", "limits"):
            assert container["resources"][side]["rdma/rdma_shared_device_a"] == 1
        # Exactly one capability back, and only here (see docs: Security).
        assert container["securityContext"]["capabilities"] == {
            "drop": ["ALL"],
            "add": ["IPC_LOCK"],
        }
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["UCX_NET_DEVICES"] == "mlx5_0:1" and env["UCX_IB_GID_INDEX"] == "3"
        shm = {v["name"]: v for v in template["spec"]["volumes"]}["dshm"]
        assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
        nixl = [p["containerPort"] for p in container["ports"] if p["name"].startswith("nixl-")]
        assert nixl == list(range(15600, 15608))
    head = ray_containers(rayservice)[0]
    assert "add" not in head["securityContext"]["capabilities"], "the head moves no KV"


def test_rdma_off_by_default(chart: helm_python.Chart) -> None:
    rayservice = one(render(chart), "RayService")
    for group in worker_groups(rayservice).values():
        spec = group["template"]["spec"]
        container = spec["containers"][0]
        assert not any(k.startswith("rdma/") for k in container["resources"]["limits"])
        assert "add" not in container["securityContext"]["capabilities"]
        assert "hostNetwork" not in spec
        assert "annotations" not in group["template"]["metadata"]
    host_net = one(render(chart, VARIANTS["rdma-hostnetwork"]), "RayService")
    for group in worker_groups(host_net).values():
        spec = group["template"]["spec"]
        assert (spec["hostNetwork"], spec["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")


@pytest.mark.parametrize(
    ("router", "ports"),
    [
        ({"num_replicas": 3}, [9001, 9002, 9003]),
        ({"num_replicas": 2, "metrics_port": 9300}, [9300, 9301]),
        ({"autoscaling": {"min_replicas": 1, "max_replicas": 4}}, [9001, 9002, 9003, 9004]),
    ],
)
def test_every_router_replica_is_scraped_on_its_own_port(
    chart: helm_python.Chart, router: dict[str, Any], ports: list[int]
) -> None:
    values = {**VARIANTS["monitoring"]}
    values["pdserve"] = {**values.get("pdserve", {})}
    values["pdserve"]["router"] = {**values["pdserve"].get("router", {}), **router}
    objects = render(chart, values)
    router_pm = next(
        o
        for o in objects
        if o["kind"] == "PodMonitor" and o["metadata"]["name"].endswith("-router")
    )
    names = [f"rmetrics-{i}" for i in range(len(ports))]
    assert [e["port"] for e in router_pm["spec"]["podMetricsEndpoints"]] == names
    head = one(objects, "RayService")["spec"]["rayClusterConfig"]["headGroupSpec"]
    declared = {
        p["name"]: p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]
    }
    assert [declared[n] for n in names] == ports
    policy = one(objects, "NetworkPolicy")
    opened = {p["port"] for rule in policy["spec"]["ingress"] for p in rule.get("ports", [])}
    assert set(ports) <= opened


def test_monitoring_objects_only_when_enabled(chart: helm_python.Chart) -> None:
    off = {o["kind"] for o in render(chart)}
    assert off == {"RayService", "NetworkPolicy"}
    objects = render(chart, VARIANTS["monitoring"])
    monitors = {o["metadata"]["name"]: o for o in objects if o["kind"] == "PodMonitor"}
    ray_pm, router_pm = monitors["demo-pdserve-ray"], monitors["demo-pdserve-router"]
    assert ray_pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    # The default two router replicas: each its own /metrics port (router.port + 1001, + 1002),
    # not the proxy's.
    assert router_pm["spec"]["podMetricsEndpoints"] == [
        {"port": f"rmetrics-{i}", "path": "/metrics", "interval": "30s"} for i in range(2)
    ]
    assert router_pm["spec"]["selector"]["matchLabels"]["ray.io/node-type"] == "head"
    for container in ray_containers(one(objects, "RayService")):
        assert {"name": "metrics", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    dashboard = one(objects, "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert one(objects, "PrometheusRule")["spec"]["groups"]


def test_notes_tell_how_to_reach_the_api(chart: helm_python.Chart) -> None:
    text = notes(chart)
    assert "port-forward svc/demo-pdserve-router 8000:8000" in text
    assert '"model": "llama-3.1-8b-instruct"' in text
    assert "--set monitoring.enabled=true" in text
