"""On CPU, every thread of each engine's processes (vLLM's EngineCore and its worker) stays on
the pool's cores (deploy/local.yaml: prefill on core 0, decode on core 1): vLLM binds only the
worker's OpenMP threads, pdserve pins the rest (pdserve/engine/pinning.py)."""

from __future__ import annotations

import os

import psutil
import pytest

from tests.integration.conftest import Cluster
from tests.integration.engine_procs import engine_processes


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_engine_threads_stay_on_their_pools_cores(cluster: Cluster, role: str) -> None:
    cores = set(cluster.config.pool(role).cpu_cores or ())
    assert cores, f"deploy/local.yaml gives {role} no cpu_cores"
    procs = engine_processes(role)  # the EngineCore and at least one worker
    outside = {}
    for proc in procs:
        try:
            threads = proc.threads()
        except psutil.NoSuchProcess:
            continue
        for t in threads:
            try:
                affinity = os.sched_getaffinity(t.id)
            except ProcessLookupError:
                continue
            if not affinity <= cores:
                outside[(proc.pid, t.id)] = affinity
    assert not outside, f"{role} engine threads outside cores {cores}: {outside}"
