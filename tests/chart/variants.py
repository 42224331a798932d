"""The chart values the chart tests render: one variant per supported layout.

Variants: the default (deploy/gpu-example.yaml), 1P1D, 4P2D, tensor-parallel prefill, RDMA with
Multus or host networking, monitoring on, autoscaling off, Ray Serve's lean path off, every router
entry point on. `IDS` are their names, in order (test_render, test_security parametrize over
them).
"""

from __future__ import annotations

from typing import Any

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
H200 = {"nvidia.com/gpu.product": "NVIDIA-H200"}
DECODE_TAINT = [{"key": "pool", "operator": "Equal", "value": "decode", "effect": "NoSchedule"}]


def _pools(p: tuple[int, int, int], d: tuple[int, int, int]) -> dict[str, Any]:
    """Serve replicas (num, min, max) per pool, and worker groups sized one GPU per replica."""
    values: dict[str, Any] = {"pdserve": {}}
    for role, (num, lo, hi) in (("prefill", p), ("decode", d)):
        values["pdserve"][role] = {
            "num_replicas": num,
            "autoscaling": {"min_replicas": lo, "max_replicas": hi},
        }
        values[role] = {"replicas": num, "minReplicas": lo, "maxReplicas": hi}
    return values


RDMA = {
    "kvTransfer": {
        "rdma": {"enabled": True},
        "networks": "rdma-net",
        "ucx": {"netDevices": "mlx5_0:1", "env": {"UCX_IB_GID_INDEX": "3"}},
    }
}
FOUR_P_TWO_D = _pools((4, 4, 8), (2, 2, 4))
FOUR_P_TWO_D["prefill"]["nodeSelector"] = H100
FOUR_P_TWO_D["decode"] |= {"nodeSelector": H200, "tolerations": DECODE_TAINT}

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "1P1D": _pools((1, 1, 1), (1, 1, 1)),
    "4P2D": FOUR_P_TWO_D,
    "tp2-prefill-8gpu-pods": {
        "pdserve": {"prefill": {"num_gpus": 2, "engine": {"tensor_parallel_size": 2}}},
        "prefill": {"gpusPerPod": 8, "replicas": 1, "minReplicas": 1, "maxReplicas": 1},
    },
    "rdma-multus": RDMA,
    "rdma-hostnetwork": {
        "kvTransfer": {"rdma": {"enabled": True}, "hostNetwork": True},
        "networkPolicy": {"nodeCIDRs": ["10.0.0.0/16"]},
    },
    "monitoring": {"monitoring": {"enabled": True}},
    "autoscaling-off": {
        "autoscaler": {"enabled": False},
        "pdserve": {"prefill": {"autoscaling": None}, "decode": {"autoscaling": None}},
    },
    "serve-lean-off": {"serve": {"lean": False}},
    "entry-points": {
        "ingress": {"enabled": True, "className": "nginx"},
        "httpRoute": {"enabled": True, "hostnames": ["llm.example.com"]},
        "apiKey": {"existingSecret": "pdserve-api-key"},
        "huggingface": {"tokenSecret": "hf-token"},
        "service": {"type": "LoadBalancer"},
    },
}
IDS = list(VARIANTS)
