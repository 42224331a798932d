"""The KV-integrity package's cluster: its ports (apart from every other test cluster's, see
tests/integration/cluster.py), its lease and prefill KV cache, and the fault file it reads."""

from __future__ import annotations

import pathlib

RAY_PORT_KV = 6395
ROUTER_PORT_KV = 14250
RAY_METRICS_PORT_KV = 8089
LEASE_S = 6
"""kv_transfer.kv_lease_seconds: vLLM's smallest useful lease (heartbeats every lease // 6 s)."""
PREFILL_KV_BYTES = 6 << 20
"""The prefill engine's KV cache: 48 blocks of 128 tokens of the demo model (1 KiB a token)."""


class Faults:
    """The fault file the cluster's hooks read (pdserve.kv_transfer.faults)."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        path.write_text("")

    def set(self, *faults: str) -> None:
        self.path.write_text("".join(f"{f}\n" for f in faults))

    def clear(self) -> None:
        self.path.write_text("")
