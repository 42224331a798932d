"""Keep an engine's processes on its replica's CPU cores.

vLLM's CPU build binds only the worker's OpenMP threads (VLLM_CPU_OMP_THREADS_BIND). Its
EngineCore process (the scheduler, which busy-waits on the worker while a step runs) keeps
the affinity it was born with: every core. On a small machine it then spins on another pool's
core, where the router and the replicas run, and delays their event loops by hundreds of
milliseconds (measured on a 2-core machine: some of an idle 1P1D cluster's streams arrived
in one burst at the end). `pin_engine_threads` moves every thread of the engine's processes
that may run outside the replica's cores onto them; threads already inside (the worker's
OpenMP threads, one per core) keep their own binding. Threads created later inherit their
creator's affinity.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

GetAffinity = Callable[[int], set[int]]
SetAffinity = Callable[[int, set[int]], None]


def pin_engine_threads(
    thread_ids: Iterable[int],
    cores: set[int],
    get_affinity: GetAffinity = os.sched_getaffinity,
    set_affinity: SetAffinity = os.sched_setaffinity,
) -> int:
    """Restrict each thread (Linux thread id) whose affinity reaches outside `cores` to
    `cores`; returns how many were moved. A thread that exits meanwhile is skipped."""
    if not cores:
        raise ValueError("no cores to pin to")
    moved = 0
    for tid in thread_ids:
        try:
            if get_affinity(tid) <= cores:
                continue
            set_affinity(tid, cores)
        except (ProcessLookupError, PermissionError):
            continue
        moved += 1
    return moved
