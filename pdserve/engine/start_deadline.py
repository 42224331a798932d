"""A deadline on an engine's start: past it, the engine's processes are killed.

vLLM's `AsyncLLM.from_engine_args` blocks until its engine-core process reports ready and has
no overall timeout while that process lives. Some start failures never end it: the NIXL
side-channel listener thread dies on a bind error (its port was taken between
`pick_free_port` and the bind) and the engine core waits for it forever. A start that hangs
holds its replica in Ray Serve's "initializing" state for good.

`StartDeadline` arms a timer thread when the start begins. If the start has not finished
when it fires, it SIGKILLs the processes the start created; the blocked call then fails
(vLLM sees its engine-core process exit) and the replica's constructor raises
`EngineStartTimeoutError`, so Ray Serve starts a fresh replica (new id, new ports), up to
its retry limit (then the deployment is DEPLOY_FAILED and `pdserve up` fails naming this error).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import psutil


class EngineStartTimeoutError(RuntimeError):
    """The engine did not become ready within its pool's engine_start_timeout_seconds."""


class StartDeadline:
    """Kills `new_processes()` once `timeout_s` passes, unless `disarm()` came first.

    Use as a context manager around the blocking start; `fired` tells afterwards whether the
    deadline passed (then whatever the start raised, or returned, is a timeout).
    """

    def __init__(self, timeout_s: float, new_processes: Callable[[], list[psutil.Process]]):
        self.timeout_s = timeout_s
        self._new_processes = new_processes
        self._lock = threading.Lock()
        self._fired = False
        self._disarmed = False
        self._timer = threading.Timer(timeout_s, self._on_timer)
        self._timer.daemon = True
        self.killed_pids: list[int] = []
        """The processes the deadline killed (empty until it fires)."""

    def __enter__(self) -> StartDeadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disarm()

    @property
    def fired(self) -> bool:
        with self._lock:
            return self._fired

    def disarm(self) -> bool:
        """Stop the timer; True when it had not fired (the start finished in time)."""
        self._timer.cancel()
        with self._lock:
            self._disarmed = True
            return not self._fired

    def expire(self) -> None:
        """Fire now, armed or not (the caller's own wait for the rest of the start ran out)."""
        self._timer.cancel()
        if self._claim(even_if_disarmed=True):
            self._kill()

    def _on_timer(self) -> None:
        if self._claim(even_if_disarmed=False):
            self._kill()

    def _claim(self, even_if_disarmed: bool) -> bool:
        """Mark the deadline fired; False when it already had (or was disarmed first)."""
        with self._lock:
            if self._fired or (self._disarmed and not even_if_disarmed):
                return False
            self._fired = True
            return True

    def _kill(self) -> None:
        for proc in self._new_processes():
            with contextlib.suppress(psutil.Error):
                proc.kill()
                self.killed_pids.append(proc.pid)
