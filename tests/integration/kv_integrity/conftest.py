"""A 1 prefill + 1 decode cluster for the KV-integrity fault cases (deploy/local.yaml with the
overrides below), started once for the package and stopped after it.

What differs from deploy/local.yaml, and why:
- `kv_transfer.kv_lease_seconds: 6` (vLLM's smallest: heartbeats every lease // 6 s) so the
  stale case waits seconds, not the default 30;
- a 6 MiB prefill KV cache (48 blocks of 128 tokens of the demo model), so a few long prompts
  reuse the blocks of a handoff whose lease ran out;
- every prompt prefills remotely (no local prefill, no spill-over), so every request has a
  handoff to check;
- `PDSERVE_FAULTS_FILE` in the cluster's environment: the tests switch the fault hooks
  (corrupt_kv, swap_handoffs) on and off by rewriting that file.
The router accepts the x-pdserve-kv-verify header (deploy/local.yaml allows overrides), so each
case runs with the check on and off on this one cluster.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pdserve.kv_transfer.faults import FAULTS_FILE_ENV
from tests.integration.cluster import Cluster, package_cluster
from tests.integration.kv_integrity.settings import (
    LEASE_S,
    PREFILL_KV_BYTES,
    RAY_METRICS_PORT_KV,
    RAY_PORT_KV,
    ROUTER_PORT_KV,
    Faults,
)


@pytest.fixture(scope="package")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Faults:
    return Faults(tmp_path_factory.mktemp("faults") / "faults")


@pytest.fixture(scope="package")
def kv_cluster(tmp_path_factory: pytest.TempPathFactory, faults: Faults) -> Iterator[Cluster]:
    overrides = {
        "prefill": {"engine": {"cpu_kv_cache_bytes": PREFILL_KV_BYTES}},
        "kv_transfer": {"kv_lease_seconds": LEASE_S, "verify": "all"},
        "router": {
            "routing": {"local_prefill_max_cold_tokens": 0, "spill_max_decode_prefill_s": 0},
            "deadlines": {"busy_replica_wait_seconds": 2},
        },
    }
    ports = (ROUTER_PORT_KV, RAY_PORT_KV, RAY_METRICS_PORT_KV)
    yield from package_cluster(
        tmp_path_factory,
        "local.yaml",
        ports,
        overrides=overrides,
        extra_env={FAULTS_FILE_ENV: str(faults.path)},
    )


@pytest.fixture(autouse=True)
def _no_fault_left_on(faults: Faults) -> Iterator[None]:
    yield
    faults.clear()
