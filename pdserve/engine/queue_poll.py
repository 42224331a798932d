"""A vLLM general plugin (entry point `vllm.general_plugins`): how long an engine's processes
busy-poll the shared-memory queue between its scheduler and its worker.

vLLM's scheduler (EngineCore) and worker talk over a shared-memory ring buffer
(`vllm.distributed.device_communicators.shm_broadcast`). A reader that has just read keeps
polling it, calling `sched_yield` in a loop, for one second (`SpinCondition.busy_loop_s`,
built in) before it sleeps on a socket until the next message. On a GPU node that costs a
host core per engine and saves microseconds. On a small CPU host the worker and the scheduler
of every engine spin after each step; under a burst the spinners held both cores of the
2-core test machine while the router, the replicas and the clients stood still for up to a
second at a time (bench/RESULTS.md, "CPU-host effects we measured and fixed"; the
measurements are in its git history).

`PDSERVE_ENGINE_QUEUE_BUSY_POLL_S=SECONDS` (set by the engine server from the pool's
`engine.queue_busy_poll_seconds`, 0.02 s on CPU by default) caps that window in every engine
and worker process; without it the plugin does nothing (plain vLLM use in the same
environment keeps vLLM's behaviour). vLLM loads general plugins in the engine-core process and
in each worker before either reads its queue; the cap applies at every wait, so a reader
created earlier follows it too.
"""

from __future__ import annotations

import logging
import os
from typing import Any

QUEUE_BUSY_POLL_ENV = "PDSERVE_ENGINE_QUEUE_BUSY_POLL_S"

log = logging.getLogger(__name__)


def register() -> None:
    """vLLM general-plugin entry point (idempotent)."""
    value = os.environ.get(QUEUE_BUSY_POLL_ENV)
    if not value:
        return
    try:
        from vllm.distributed.device_communicators import shm_broadcast
    except ImportError:
        return
    cap_busy_poll(shm_broadcast.SpinCondition, float(value))


def cap_busy_poll(spin_condition: Any, seconds: float) -> bool:
    """Make every reader of `spin_condition` (vLLM's SpinCondition class) busy-poll at most
    `seconds` after a read. False, and a warning, when the class is not the one this was
    written for (vLLM 0.32: a `wait` method and a `busy_loop_s` attribute per reader)."""
    wait = getattr(spin_condition, "wait", None)
    if wait is None:
        log.warning("vLLM's SpinCondition has no wait(): queue busy-poll cap not applied")
        return False
    if getattr(wait, "_pdserve_cap_s", None) is not None:
        wait._pdserve_cap_s = seconds
        return True

    def capped_wait(self: Any, timeout_ms: int | None = None) -> None:
        cap_s = capped_wait._pdserve_cap_s  # type: ignore[attr-defined]
        if getattr(self, "busy_loop_s", 0.0) > cap_s:
            self.busy_loop_s = cap_s
        wait(self, timeout_ms)

    capped_wait._pdserve_cap_s = seconds  # type: ignore[attr-defined]
    spin_condition.wait = capped_wait
    return True
