"""pdserve.serve_env: the lean path's Ray Serve settings, and what the installed Ray Serve makes
of them (read back from its constants module in a fresh interpreter; no cluster)."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from pdserve.serve_env import DIRECT_INGRESS_HTTP_PORTS, lean_serve_env
from tests.chart.helpers import ray_serve_reads


def test_local_cluster_settings_with_direct_ingress_on_the_router_port() -> None:
    assert lean_serve_env(8000) == {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
        "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
        "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": "1",
        "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": "8000",
        "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(8000 + DIRECT_INGRESS_HTTP_PORTS),
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2.0",
    }


def test_without_a_direct_ingress_port_only_direct_ingress_differs() -> None:
    with_port, without = lean_serve_env(9000), lean_serve_env(None)
    ingress_ports = {
        "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT",
        "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT",
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S",
    }
    assert {k: v for k, v in with_port.items() if k not in ingress_ports} == {
        k: v for k, v in without.items() if k != "RAY_SERVE_ENABLE_DIRECT_INGRESS"
    }
    assert without["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "0"
    assert not ingress_ports & without.keys()


def test_every_name_is_one_the_installed_ray_serve_reads() -> None:
    ray_spec = importlib.util.find_spec("ray")  # located, not imported
    assert ray_spec and ray_spec.origin
    constants = pathlib.Path(ray_spec.origin).parent / "serve" / "_private" / "constants.py"
    source = constants.read_text()
    for name in {*lean_serve_env(8000), *lean_serve_env(None)}:
        assert f'"{name}"' in source, f"Ray Serve does not read {name}"


def test_ray_serve_reads_the_local_settings_as_direct_ingress_on_the_router_port() -> None:
    settings = ray_serve_reads(lean_serve_env(8000))
    assert settings["RAY_SERVE_THROUGHPUT_OPTIMIZED"] is True
    assert settings["RAY_SERVE_ENABLE_DIRECT_INGRESS"] is True
    assert settings["RAY_SERVE_USE_GRPC_BY_DEFAULT"] is True
    assert settings["CONTROL_LOOP_INTERVAL_S"] == 0.5
    assert settings["RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE"] == 1
    assert settings["RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"] == 2.0
    # The controller hands out ports from range(MIN, MAX): router.port first.
    assert (
        settings["RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"],
        settings["RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT"],
    ) == (8000, 8000 + DIRECT_INGRESS_HTTP_PORTS)


def test_a_port_without_room_for_the_ingress_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"pick a lower router\.port"):
        lean_serve_env(65500)
