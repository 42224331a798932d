"""The GPU example's pool layout (deploy/gpu-example.yaml: 2 prefill + 1 decode replicas, each
pool pinned by its Ray resource) run on CPU: the platform, model and engine settings come from
deploy/local.yaml, everything about placement stays as the GPU example has it."""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from tests.integration.two_node.netns import LINK

ROOT = pathlib.Path(__file__).resolve().parents[3]


def gpu_example_on_cpu(router_port: int, cores: dict[str, list[int]]) -> dict[str, Any]:
    """The raw config: gpu-example.yaml with a CPU overlay. KV moves over UCX's TCP transport
    on the link between the two namespaces (on one machine UCX would otherwise pick shared
    memory, which never touches the network)."""
    raw: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "gpu-example.yaml").read_text())
    local: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "local.yaml").read_text())
    raw["platform"] = "cpu"
    raw["model"] = local["model"]
    for pool in ("prefill", "decode"):
        raw[pool]["num_gpus"] = 0
        raw[pool]["autoscaling"] = None  # the example's replica counts, fixed for the test
        raw[pool]["engine"] = local[pool]["engine"]
        raw[pool]["cpu_cores"] = cores[pool]
    # The two prefill engines share one core: as in deploy/local-2p1d.yaml, their schedulers
    # are left to the OS.
    raw["prefill"]["pin_engine_core"] = False
    raw["kv_transfer"].update(
        buffer_device="cpu",
        num_threads=1,
        ucx_env={"UCX_TLS": "tcp", "UCX_NET_DEVICES": LINK},
    )
    raw["router"] = {**local["router"], "host": "127.0.0.1", "port": router_port}
    return raw
