"""Secure by default: non-root pods without privileges, a NetworkPolicy that keeps Ray's ports
to the release, a dashboard that stays inside the cluster, and images that create the user the
chart runs as.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import helm_python
import pytest

from tests.chart.helpers import (
    REPO_ROOT,
    kinds,
    one,
    ray_containers,
    render,
    validate_object,
)
from tests.chart.variants import IDS, VARIANTS

UID = GID = 1000
RUNTIME_DEFAULT = {"type": "RuntimeDefault"}
RELEASE_PODS = {
    "podSelector": {
        "matchLabels": {"app.kubernetes.io/name": "pdserve", "app.kubernetes.io/instance": "demo"}
    }
}
MONITORING = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
OPERATOR = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}},
}
# Ports only the release's own pods may reach: GCS, Ray client, dashboard agent, and the ranges
# the engines pick their NIXL side-channel and KV-event ports from (base + crc32 offset
# (0..1996) + up to 199 tries: pdserve/engine/server.py, kv_transfer/ports.py).
NIXL_PORTS = range(15600, 15600 + 1996 + 200)
KV_EVENT_PORTS = range(16600, 16600 + 1996 + 200)
PRIVATE_PORTS = {6379, 10001, 52365} | set(NIXL_PORTS) | set(KV_EVENT_PORTS)
# Fields a container's securityContext takes from the pod's unless it sets them itself.
POD_LEVEL_DEFAULTS = ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile")


def _pod_specs(rayservice: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = rayservice["spec"]["rayClusterConfig"]
    specs = {"head": cluster["headGroupSpec"]["template"]["spec"]}
    specs |= {g["groupName"]: g["template"]["spec"] for g in cluster["workerGroupSpecs"]}
    return specs


def _effective(pod_spec: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The securityContext the kubelet applies to a container (pod fields as its defaults)."""
    pod = pod_spec.get("securityContext", {})
    inherited = {k: pod[k] for k in POD_LEVEL_DEFAULTS if k in pod}
    return {**inherited, **container.get("securityContext", {})}


def _ports(rule: dict[str, Any]) -> set[int]:
    return {p["port"] for p in rule.get("ports", [])}


# ------------------------------------------------------------------------ securityContext
@pytest.mark.parametrize("name", IDS)
def test_every_container_runs_non_root_without_privileges(
    chart: helm_python.Chart, name: str
) -> None:
    rayservice = one(render(chart, VARIANTS[name]), "RayService")
    rdma = chart.merge_values(copy.deepcopy(VARIANTS[name]))["kvTransfer"]["rdma"]["enabled"]
    for group, spec in _pod_specs(rayservice).items():
        pod = spec["securityContext"]
        assert (pod["runAsNonRoot"], pod["runAsUser"], pod["runAsGroup"]) == (True, UID, GID)
        assert (pod["fsGroup"], pod["seccompProfile"]) == (GID, RUNTIME_DEFAULT)
        for container in spec["containers"] + spec.get("initContainers", []):
            sc = _effective(spec, container)
            assert (sc["runAsNonRoot"], sc["runAsUser"], sc["runAsGroup"]) == (True, UID, GID)
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["seccompProfile"] == RUNTIME_DEFAULT
            assert not sc.get("privileged", False)
            # RDMA gets IPC_LOCK back on the pods that move KV, and nothing else anywhere.
            added = ["IPC_LOCK"] if rdma and group != "head" else None
            assert sc["capabilities"] == {"drop": ["ALL"]} | ({"add": added} if added else {})
    cluster = rayservice["spec"]["rayClusterConfig"]
    if cluster["enableInTreeAutoscaling"]:
        # KubeRay's autoscaler sidecar runs in the head pod with this securityContext.
        assert cluster["autoscalerOptions"]["securityContext"] == {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": RUNTIME_DEFAULT,
        }


def test_security_contexts_are_configurable(chart: helm_python.Chart) -> None:
    values = {
        "podSecurityContext": {"runAsUser": 2000, "runAsGroup": 2000, "fsGroup": None},
        "securityContext": {"readOnlyRootFilesystem": True},
        "autoscaler": {"options": {"securityContext": {"runAsNonRoot": True}}},
    }
    rayservice = one(render(chart, values), "RayService")
    for spec in _pod_specs(rayservice).values():
        assert spec["securityContext"]["runAsUser"] == 2000
        assert "fsGroup" not in spec["securityContext"]
        sc = spec["containers"][0]["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}, "the other defaults stay"
    options = rayservice["spec"]["rayClusterConfig"]["autoscalerOptions"]
    assert options["securityContext"] == {"runAsNonRoot": True}


@pytest.mark.parametrize("dockerfile", ["Dockerfile.gpu", "Dockerfile.cpu"])
def test_images_create_and_run_as_the_chart_user(chart: helm_python.Chart, dockerfile: str) -> None:
    text = (REPO_ROOT / "docker" / dockerfile).read_text()
    pod = chart.values["podSecurityContext"]
    build_args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))
    assert int(build_args["PDSERVE_UID"]) == pod["runAsUser"]
    assert int(build_args["PDSERVE_GID"]) == pod["runAsGroup"] == pod["fsGroup"]
    assert 'groupadd --gid "${PDSERVE_GID}" pdserve' in text
    assert 'useradd --uid "${PDSERVE_UID}" --gid "${PDSERVE_GID}" --create-home' in text
    assert "--home-dir /home/pdserve" in text and "ENV HOME=/home/pdserve" in text
    # One USER, numeric (Kubernetes can check runAsNonRoot), after every RUN: packages are
    # installed as root and stay read-only; the container runs as the user.
    assert re.findall(r"^USER (.+)$", text, re.MULTILINE) == ["${PDSERVE_UID}:${PDSERVE_GID}"]
    last_run = max(m.start() for m in re.finditer(r"^RUN ", text, re.MULTILINE))
    assert text.index("\nUSER ") > last_run


# -------------------------------------------------------------------------- NetworkPolicy
def test_network_policy_keeps_ray_ports_to_the_release(chart: helm_python.Chart) -> None:
    objects = render(chart)
    policy = one(objects, "NetworkPolicy")
    validate_object(policy)
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    # It selects every Ray pod the RayService creates (head and both worker groups).
    for pod_spec_labels in _template_labels(one(objects, "RayService")):
        assert spec["podSelector"]["matchLabels"].items() <= pod_spec_labels.items()
    internal, router, metrics, operator = spec["ingress"]
    # The release's pods reach each other on every port (Ray's ports are mostly random).
    assert internal == {"from": [RELEASE_PODS]}
    # Clients reach the router port from anywhere, and nothing else.
    assert router == {"ports": [{"port": 8000, "protocol": "TCP"}]}
    # Ray's metrics, the router port and the default two router replicas' own /metrics
    # (router.port + 1001, + 1002).
    assert metrics["from"] == [MONITORING] and _ports(metrics) == {8080, 8000, 9001, 9002}
    assert operator["from"] == [OPERATOR] and _ports(operator) == {8265, 8000}
    for rule in (router, metrics, operator):
        assert all("endPort" not in p for p in rule["ports"])
        assert not _ports(rule) & PRIVATE_PORTS, "GCS, NIXL or KV-event ports opened"


def _template_labels(rayservice: dict[str, Any]) -> list[dict[str, str]]:
    cluster = rayservice["spec"]["rayClusterConfig"]
    templates = [cluster["headGroupSpec"]["template"]]
    templates += [g["template"] for g in cluster["workerGroupSpecs"]]
    return [t["metadata"]["labels"] for t in templates]


def test_network_policy_follows_values(chart: helm_python.Chart) -> None:
    gateway = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gw"}}}
    extra = {"from": [{"ipBlock": {"cidr": "192.168.0.0/24"}}], "ports": [{"port": 10001}]}
    values = {
        "pdserve": {"router": {"port": 9000}},
        "networkPolicy": {
            "router": {"from": [gateway]},
            "metrics": {"from": []},
            "operator": {"from": []},
            "extraIngress": [extra],
        },
    }
    policy = one(render(chart, values), "NetworkPolicy")
    validate_object(policy)
    internal, router, added = policy["spec"]["ingress"]
    assert internal == {"from": [RELEASE_PODS]}
    assert router == {"ports": [{"port": 9000, "protocol": "TCP"}], "from": [gateway]}
    assert added == extra
    assert "NetworkPolicy" not in kinds(render(chart, {"networkPolicy": {"enabled": False}}))


def test_host_network_workers_are_admitted_by_node_cidr(chart: helm_python.Chart) -> None:
    values = {
        "kvTransfer": {"hostNetwork": True},
        "networkPolicy": {"nodeCIDRs": ["10.0.0.0/16", "fd00::/64"]},
    }
    internal = one(render(chart, values), "NetworkPolicy")["spec"]["ingress"][0]
    assert internal == {
        "from": [
            RELEASE_PODS,
            {"ipBlock": {"cidr": "10.0.0.0/16"}},
            {"ipBlock": {"cidr": "fd00::/64"}},
        ]
    }


def test_validator_rejects_a_broken_network_policy(chart: helm_python.Chart) -> None:
    policy = one(render(chart), "NetworkPolicy")
    policy["spec"]["ingress"][1]["ports"][0]["prot"] = "TCP"
    with pytest.raises(AssertionError, match="NetworkPolicy/demo-pdserve is invalid"):
        validate_object(policy)


# ------------------------------------------------------------------------------ dashboard
@pytest.mark.parametrize("name", IDS)
def test_dashboard_is_not_exposed_outside_the_cluster(chart: helm_python.Chart, name: str) -> None:
    objects = render(chart, VARIANTS[name])
    rayservice = one(objects, "RayService")
    head = rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]
    # KubeRay's head Service (GCS, dashboard, client) stays ClusterIP, with no Ingress.
    assert (head["serviceType"], head["enableIngress"]) == ("ClusterIP", False)
    assert "headService" not in head and "ingressOptions" not in head
    assert "Service" not in kinds(objects)
    # The only Service the chart has KubeRay create, and every route, lead to the router.
    serve_ports = rayservice["spec"]["serveService"]["spec"]["ports"]
    assert [p["targetPort"] for p in serve_ports] == [8000]
    for ingress in (o for o in objects if o["kind"] == "Ingress"):
        backends = [
            p["backend"]["service"] for r in ingress["spec"]["rules"] for p in r["http"]["paths"]
        ]
        assert {b["name"] for b in backends} == {"demo-pdserve-router"}
    for route in (o for o in objects if o["kind"] == "HTTPRoute"):
        refs = [ref["name"] for rule in route["spec"]["rules"] for ref in rule["backendRefs"]]
        assert set(refs) == {"demo-pdserve-router"}
    # Only the release's pods and the KubeRay operator may reach the dashboard port.
    policy = one(objects, "NetworkPolicy")
    assert [r.get("from") for r in policy["spec"]["ingress"] if 8265 in _ports(r)] == [[OPERATOR]]


def test_head_ray_start_params_override_the_dashboard_binding(chart: helm_python.Chart) -> None:
    values = {"head": {"rayStartParams": {"dashboard-host": "127.0.0.1", "dashboard-port": 8266}}}
    objects = render(chart, values)
    rayservice = one(objects, "RayService")
    params = rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]
    assert (params["dashboard-host"], params["dashboard-port"]) == ("127.0.0.1", "8266")
    head = ray_containers(rayservice)[0]
    assert {"name": "dashboard", "containerPort": 8266, "protocol": "TCP"} in head["ports"]
    operator = one(objects, "NetworkPolicy")["spec"]["ingress"][3]
    assert _ports(operator) == {8266, 8000}


# ------------------------------------------------------------------------------- pod env
@pytest.mark.parametrize("name", IDS)
def test_every_ray_container_gets_its_pod_ip(chart: helm_python.Chart, name: str) -> None:
    rayservice = one(render(chart, VARIANTS[name]), "RayService")
    for container in ray_containers(rayservice):
        env = {e["name"]: e for e in container["env"]}
        assert env["PDSERVE_POD_IP"] == {
            "name": "PDSERVE_POD_IP",
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
        }
        # Non-root cannot lower its niceness: Ray must start workers (engines) at 0.
        assert env["RAY_worker_niceness"] == {"name": "RAY_worker_niceness", "value": "0"}
