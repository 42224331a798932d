"""serve.lean: the chart runs Ray Serve's lean path, the same settings as `pdserve up`
(pdserve/serve_env.py), in the head and in both worker groups, while HTTP stays on the Serve
proxies that the router Service, the probes and KubeRay's proxy health check point at; off, it
renders Ray Serve's defaults.

The rendered env is also read back through the installed Ray Serve (its constants module, in a
fresh interpreter) so that a name Ray does not read, or a value it reads differently, fails here.
"""

from __future__ import annotations

from typing import Any

import helm_python
import pytest

from pdserve.serve_env import lean_serve_env
from tests.chart.helpers import (
    RELEASE,
    one,
    plain_env,
    ray_containers,
    ray_serve_reads,
    render,
    serve_config,
    worker_groups,
)

# What Ray Serve 2.60 runs with when none of its variables are set.
RAY_SERVE_DEFAULTS = {
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": False,
    "RAY_SERVE_ENABLE_DIRECT_INGRESS": False,
    "RAY_SERVE_USE_GRPC_BY_DEFAULT": False,
    "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": True,
    "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": True,
    "RAY_SERVE_LOG_TO_STDERR": True,
    "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": 1,
    "CONTROL_LOOP_INTERVAL_S": 0.1,
}
# The lean path on Kubernetes: everything of the throughput mode but direct ingress.
LEAN_ON_KUBERNETES = {
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": True,
    "RAY_SERVE_ENABLE_DIRECT_INGRESS": False,
    "RAY_SERVE_ENABLE_HA_PROXY": False,
    "RAY_SERVE_USE_GRPC_BY_DEFAULT": True,
    "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": False,
    "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": False,
    "RAY_SERVE_LOG_TO_STDERR": False,
    "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": 1,
    "RAY_SERVE_FREEZE_GC_ON_STARTUP": True,
    "CONTROL_LOOP_INTERVAL_S": 0.5,
}


def _containers_by_role(rayservice: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The Ray container of the head and of each worker group, by role."""
    head = ray_containers(rayservice)[0]
    workers = {
        role: group["template"]["spec"]["containers"][0]
        for role, group in worker_groups(rayservice).items()
    }
    return {"head": head, **workers}


def _serve_vars(container: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in plain_env(container).items() if k.startswith("RAY_SERVE_")}


def _picked(settings: dict[str, Any], names: dict[str, Any]) -> dict[str, Any]:
    return {name: settings[name] for name in names}


def test_lean_env_on_the_head_and_both_worker_groups_is_the_python_source(
    chart: helm_python.Chart,
) -> None:
    containers = _containers_by_role(one(render(chart), "RayService"))
    assert sorted(containers) == ["decode", "head", "prefill"]
    for role, container in containers.items():
        assert _serve_vars(container) == lean_serve_env(None), role
        assert plain_env(container)["RAY_worker_niceness"] == "0", role
        names = [e["name"] for e in container["env"]]
        assert len(names) == len(set(names)), f"{role}: an env variable is set twice"


def test_lean_off_sets_no_ray_serve_variable(chart: helm_python.Chart) -> None:
    containers = _containers_by_role(one(render(chart, {"serve": {"lean": False}}), "RayService"))
    for role, container in containers.items():
        assert _serve_vars(container) == {}, role
        # Not a Serve setting: engines run at normal priority either way.
        assert plain_env(container)["RAY_worker_niceness"] == "0", role


def test_installed_ray_serve_reads_the_rendered_lean_env_as_the_lean_path(
    chart: helm_python.Chart,
) -> None:
    head = ray_containers(one(render(chart), "RayService"))[0]
    settings = ray_serve_reads(plain_env(head))
    assert _picked(settings, LEAN_ON_KUBERNETES) == LEAN_ON_KUBERNETES


def test_installed_ray_serve_reads_the_lean_off_env_as_its_defaults(
    chart: helm_python.Chart,
) -> None:
    head = ray_containers(one(render(chart, {"serve": {"lean": False}}), "RayService"))[0]
    settings = ray_serve_reads(plain_env(head))
    assert settings == ray_serve_reads({})
    assert _picked(settings, RAY_SERVE_DEFAULTS) == RAY_SERVE_DEFAULTS


@pytest.mark.parametrize("port", [8000, 9000])
def test_router_service_and_probes_target_the_port_the_serve_proxies_listen_on(
    chart: helm_python.Chart, port: int
) -> None:
    rayservice = one(render(chart, {"pdserve": {"router": {"port": port}}}), "RayService")
    config = serve_config(rayservice)
    # Without direct ingress, Ray Serve runs an HTTP proxy on every node that hosts a replica
    # (proxy_location EveryNode: the serve config sets no other) at http_options.port, and the
    # router is reached through it; with direct ingress there would be one proxy (head) and the
    # router would listen on a port the controller assigns per replica.
    containers = _containers_by_role(rayservice)
    for role, container in containers.items():
        assert ray_serve_reads(plain_env(container))["RAY_SERVE_ENABLE_DIRECT_INGRESS"] is False
        serve_ports = [p["containerPort"] for p in container["ports"] if p["name"] == "serve"]
        assert serve_ports == [port], role
    assert "proxy_location" not in config
    assert config["http_options"]["port"] == port
    # The router Service (KubeRay keeps it on pods whose proxy is healthy; it checks the head's
    # proxy on the head container's port named "serve").
    (svc_port,) = rayservice["spec"]["serveService"]["spec"]["ports"]
    assert (svc_port["name"], svc_port["targetPort"]) == ("serve", port)
    assert containers["head"]["livenessProbe"]["httpGet"] == {"path": "/health", "port": port}
    for role in ("prefill", "decode"):
        probe = containers[role]["readinessProbe"]["httpGet"]
        assert probe == {"path": "/ready", "port": port}


def test_extra_env_replaces_a_lean_value_without_a_duplicate(chart: helm_python.Chart) -> None:
    values = {"extraEnv": [{"name": "RAY_SERVE_CONTROL_LOOP_INTERVAL_S", "value": "0.2"}]}
    for role, container in _containers_by_role(one(render(chart, values), "RayService")).items():
        names = [e["name"] for e in container["env"]]
        assert names.count("RAY_SERVE_CONTROL_LOOP_INTERVAL_S") == 1, role
        assert _serve_vars(container) == {
            **lean_serve_env(None),
            "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.2",
        }


@pytest.mark.parametrize(
    "values",
    [
        {"extraEnv": [{"name": "RAY_SERVE_ENABLE_DIRECT_INGRESS", "value": "1"}]},
        {"extraEnv": [{"name": "RAY_SERVE_ENABLE_HA_PROXY", "value": "1"}]},
        # The throughput mode turns direct ingress on unless told otherwise.
        {
            "serve": {"lean": False},
            "extraEnv": [{"name": "RAY_SERVE_THROUGHPUT_OPTIMIZED", "value": "1"}],
        },
    ],
)
def test_extra_env_that_turns_on_direct_ingress_is_refused(
    chart: helm_python.Chart, values: dict[str, Any]
) -> None:
    with pytest.raises(helm_python.HelmRenderError, match="execution error") as caught:
        chart.render(values, name=RELEASE)
    assert "turns on Ray Serve's direct ingress" in str(caught.value)
    assert "serve.lean" in str(caught.value)


def test_extra_env_may_add_the_throughput_mode_with_direct_ingress_off(
    chart: helm_python.Chart,
) -> None:
    values = {
        "serve": {"lean": False},
        "extraEnv": [
            {"name": "RAY_SERVE_THROUGHPUT_OPTIMIZED", "value": "1"},
            {"name": "RAY_SERVE_ENABLE_DIRECT_INGRESS", "value": "0"},
        ],
    }
    head = ray_containers(one(render(chart, values), "RayService"))[0]
    assert ray_serve_reads(plain_env(head))["RAY_SERVE_ENABLE_DIRECT_INGRESS"] is False
