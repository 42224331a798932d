"""On CPU, every thread of each engine's processes (vLLM's EngineCore and its worker) stays on
the pool's cores (deploy/local.yaml: prefill on core 0, decode on core 1): vLLM binds only the
worker's OpenMP threads, pdserve pins the rest (pdserve/engine/pinning.py). And the engines go
quiet soon after their work is done instead of busy-polling for a second
(pdserve/engine/queue_poll.py)."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from tests.integration.cluster import Cluster
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


SETTLE_S = 0.3
WINDOW_S = 0.6
MAX_CPU_S = 0.15
"""After a request, from SETTLE_S on for WINDOW_S, each engine process may use at most
MAX_CPU_S of CPU: with vLLM's built-in busy-poll (1 s after every step) the scheduler and the
worker of each engine spin through the whole window, about WINDOW_S each."""


def _cpu_s(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(times.user + times.system)


def test_engines_stop_busy_polling_soon_after_their_work(cluster: Cluster) -> None:
    procs = engine_processes("prefill") + engine_processes("decode")
    # A long prompt goes through both engines (remote prefill, then decode).
    prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * 60)
    out = cluster.client().completions.create(
        model=cluster.config.model.served_model_name, prompt=prompt, max_tokens=16
    )
    assert out.usage is not None and out.usage.completion_tokens > 0
    time.sleep(SETTLE_S)
    before = {p.pid: _cpu_s(p) for p in procs}
    time.sleep(WINDOW_S)
    used_s = {(p.pid, p.name()): round(_cpu_s(p) - before[p.pid], 3) for p in procs}
    busy = {k: v for k, v in used_s.items() if v > MAX_CPU_S}
    assert not busy, f"engine processes still busy {SETTLE_S} s after their work: {used_s}"
