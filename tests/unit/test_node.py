"""What a node of a multi-node cluster advertises, where its engines bind, and the `ray start`
flags pdserve passes: pure rules, no Ray."""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys

import psutil
import pytest
from pydantic import ValidationError

from pdserve.config import PdserveConfig, load_config
from pdserve.node import (
    MARKER_AMOUNT,
    NodeSpec,
    node_resources,
    parse_cores,
    pool_marker,
    unplaceable_pools,
)
from pdserve.ray_node import detect_address, node_environment, ray_start_args

ROOT = pathlib.Path(__file__).resolve().parents[2]
GPU_EXAMPLE = load_config(ROOT / "deploy" / "gpu-example.yaml")


def test_a_node_advertises_the_markers_of_the_pools_it_carries() -> None:
    assert node_resources(PdserveConfig(), ("decode",)) == {"pdserve_decode": MARKER_AMOUNT}
    both = node_resources(PdserveConfig(), ("prefill", "decode"))
    assert both == {pool_marker("prefill"): MARKER_AMOUNT, pool_marker("decode"): MARKER_AMOUNT}
    assert node_resources(PdserveConfig(), ()) == {}


def test_a_node_advertises_what_its_pools_ask_for_at_their_largest() -> None:
    cfg = PdserveConfig.model_validate(
        {
            "prefill": {"ray_resources": {"fast_gpu": 1, "pdserve_prefill": 1}, "num_replicas": 3},
            "decode": {
                "ray_resources": {"fast_gpu": 0.5},
                "autoscaling": {"min_replicas": 1, "max_replicas": 6},
            },
        }
    )
    res = node_resources(cfg, ("prefill", "decode"))
    assert res["fast_gpu"] == 3 * 1 + 6 * 0.5  # both pools' replicas at their most
    assert res["pdserve_prefill"] == MARKER_AMOUNT  # the marker covers the 3 asked for
    assert node_resources(cfg, ("decode",)) == {"fast_gpu": 3.0, "pdserve_decode": MARKER_AMOUNT}


def test_the_gpu_example_places_on_a_head_carrying_both_pools_once_gpus_exist() -> None:
    head = node_resources(GPU_EXAMPLE, ("prefill", "decode"))
    missing = unplaceable_pools(GPU_EXAMPLE, head)  # no GPU on this node
    assert len(missing) == 2 and all("GPU: 1" in line for line in missing)
    assert "pdserve_" not in " ".join(missing)  # the pool resources themselves are there
    assert unplaceable_pools(GPU_EXAMPLE, {**head, "GPU": 8}) == []


def test_a_pool_no_node_carries_is_named_with_what_to_do() -> None:
    head_only_prefill = {**node_resources(GPU_EXAMPLE, ("prefill",)), "GPU": 1}
    (line,) = unplaceable_pools(GPU_EXAMPLE, head_only_prefill)
    assert line.startswith("decode replicas ask for pdserve_decode: 1")
    assert "pdserve join HEAD --pool decode" in line


@pytest.mark.parametrize(
    ("text", "cores"),
    [("0", (0,)), ("0-3", (0, 1, 2, 3)), ("0-1,6", (0, 1, 6)), ("2, 4", (2, 4))],
)
def test_parse_cores(text: str, cores: tuple[int, ...]) -> None:
    assert parse_cores(text) == cores


@pytest.mark.parametrize("text", ["", "a", "3-1", "0,0", "1-", "-2", "0,,1"])
def test_parse_cores_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cores(text)


def test_node_spec_refuses_a_pool_twice_and_unknown_pools() -> None:
    with pytest.raises(ValidationError):
        NodeSpec.model_validate({"kind": "worker", "pools": ("decode", "decode")})
    with pytest.raises(ValidationError):
        NodeSpec.model_validate({"kind": "worker", "pools": ("router",)})
    assert NodeSpec(kind="worker", cores=(2, 3)).num_cpus() == 2


def _flags(args: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in args if "=" in a)


def test_a_single_node_lets_ray_pick_its_address_and_keeps_pdserve_on_loopback() -> None:
    spec = NodeSpec(kind="single")
    args = ray_start_args(spec, "127.0.0.1", {"pdserve_prefill": 100.0}, 6390, 8081)
    flags = _flags(args)
    assert "--head" in args and flags["port"] == "6390"
    assert "node-ip-address" not in flags  # Ray maps 127.0.0.1 to the machine's address anyway
    assert json.loads(flags["resources"]) == {"pdserve_prefill": 100.0}
    assert node_environment("127.0.0.1", {})["PDSERVE_NODE_ADDRESS"] == "127.0.0.1"


def test_a_head_and_a_worker_name_their_address_and_the_worker_joins_the_head() -> None:
    head = _flags(ray_start_args(NodeSpec(kind="head"), "10.0.0.1", {}, 6390, 8081))
    assert head["node-ip-address"] == "10.0.0.1" and head["include-dashboard"] == "false"
    worker_spec = NodeSpec(kind="worker", pools=("decode",), cores=(4, 5, 6))
    args = ray_start_args(worker_spec, "10.0.0.2", {"pdserve_decode": 100.0}, 6390, 8081,
                          head_address="10.0.0.1:6390")  # fmt: skip
    worker = _flags(args)
    assert "--head" not in args and worker["address"] == "10.0.0.1:6390"
    assert worker["node-ip-address"] == "10.0.0.2" and worker["num-cpus"] == "3"
    assert "port" not in worker and "include-dashboard" not in worker  # head-only flags
    with pytest.raises(ValueError):
        ray_start_args(worker_spec, "10.0.0.2", {}, 6390, 8081)  # a worker without a head
    env = node_environment("10.0.0.2", {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"})
    assert env["PDSERVE_NODE_ADDRESS"] == "10.0.0.2"
    assert env["RAY_SERVE_THROUGHPUT_OPTIMIZED"] == "1" and env["RAY_worker_niceness"] == "0"


def test_without_node_ip_a_worker_advertises_the_address_that_routes_to_its_head() -> None:
    """Ray's own detection (no --node-ip): the source address of the route toward the head. Run
    in a fresh interpreter: once a process has joined a Ray cluster, Ray answers its node's
    address whatever the head."""
    own = [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ][:1]  # a machine with only loopback has none to try
    heads = ["127.0.0.1", *own]
    code = (
        "import sys; from pdserve.node import NodeSpec; from pdserve.ray_node import "
        "detect_address; w = NodeSpec(kind='worker', pools=('decode',)); "
        "print(' '.join(detect_address(w, h + ':6390') for h in sys.argv[1:]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *heads], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == heads
    assert detect_address(NodeSpec(kind="single"), None) == "127.0.0.1"
    assert detect_address(NodeSpec(kind="head", address="10.9.8.7"), None) == "10.9.8.7"


def test_a_gcs_address_where_nothing_listens_is_unreachable_at_once() -> None:
    """`ray status` retries for ~40 s against a closed port; `reachable` asks the port first,
    so `pdserve up` and `down` on a fresh machine do not wait for it."""
    import socket
    import time

    from pdserve.ray_node import port_open, reachable

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        assert port_open(address)
    started = time.monotonic()
    assert not port_open(address) and not reachable(address)
    assert time.monotonic() - started < 5
    assert not port_open("not-an-address")
