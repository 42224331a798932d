"""How late the router's event loop runs what is ready to run (pure, clock and sleep injected).

Every request in a router replica shares one asyncio event loop: while anything blocks it (a
synchronous import, a full garbage collection over a large heap, a starved CPU), no request is
parsed, placed or streamed. The sampler sleeps a fixed interval in a loop and reports how much
later than asked it woke: that excess is time the loop could not run anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

DEFAULT_INTERVAL_S = 0.05
"""20 wake-ups a second: a pause of 50 ms or more is always seen, at a negligible cost."""


class LoopLagSampler:
    """Reports each wake-up's lateness (seconds, >= 0) to `observe` until cancelled.

    Contract: `run()` never returns on its own; cancel its task to stop it. `observe` is
    called from the event loop's thread, once per `interval_s` plus the lag it reports.
    """

    def __init__(
        self,
        observe: Callable[[float], None],
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self._observe = observe
        self._interval_s = interval_s
        self._clock = clock
        self._sleep = sleep

    async def run(self) -> None:
        while True:
            asked_at_s = self._clock()
            await self._sleep(self._interval_s)
            self._observe(max(0.0, self._clock() - asked_at_s - self._interval_s))


class LoopLagTask:
    """Runs one sampler as a task on the running loop from `start()` (idempotent, cheap: the
    app calls it on every request) until `stop()`.

    The app starts it on its first request, not when the replica starts: Ray Serve collects
    and freezes a replica's heap after its constructor (0.6-0.8 s on a 2-core host), before
    any request; that is start-up, not lag a request can meet."""

    def __init__(self, sampler: LoopLagSampler):
        self._sampler = sampler
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._sampler.run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
