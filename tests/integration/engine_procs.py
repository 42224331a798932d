"""Finding the local test cluster's vLLM engine processes by the markers pdserve gives them."""

from __future__ import annotations

import time

import psutil

from pdserve.cluster_procs import Scope, pool_engines
from tests.integration.cluster import RAY_PORT


def engine_processes(role: str, timeout_s: float = 60.0) -> list[psutil.Process]:
    """The vLLM engine processes (EngineCore and workers) of this cluster's `role` engine, once
    its EngineCore has a worker. Fails naming every marked process it saw when there is none
    after `timeout_s` (a replica that is being replaced has none for a while)."""
    deadline = time.monotonic() + timeout_s
    while True:
        engines = pool_engines(Scope(RAY_PORT), role)
        found = [p for core, workers in engines if workers for p in (core, *workers)]
        if found:
            return found
        if time.monotonic() > deadline:
            seen = [(core.pid, [w.pid for w in workers]) for core, workers in engines]
            raise AssertionError(
                f"no {role} engine with a worker in the cluster on Ray port {RAY_PORT} after "
                f"{timeout_s:.0f} s; its {role} engines (EngineCore pid, worker pids): {seen}"
            )
        time.sleep(1)
