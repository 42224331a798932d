"""Per-request deadlines (pure): how long the next step of a request may take.

`RequestDeadlines` is built once per request by the orchestrator from
`router.deadlines` and the request's arrival time; before each awaited step it asks for that
step's budget. A budget is the tightest of the stage's own limit and the request's remaining
first-token / whole-request time, and names which deadline it is, so a miss reports the right
one. No I/O; the clock is injected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pdserve.config import DeadlineConfig


@dataclass(frozen=True, slots=True)
class Budget:
    """Seconds the next step may take, and the deadline that sets it."""

    seconds: float
    code: str
    """prefill_timeout | first_token_timeout | stream_idle_timeout | request_timeout"""
    limit_s: float
    """The configured limit behind `code` (for the error message)."""

    def message(self) -> str:
        what = {
            "prefill_timeout": "the prefill did not finish",
            "first_token_timeout": "no first token",
            "stream_idle_timeout": "no tokens from the decode engine",
            "request_timeout": "the request did not finish",
        }[self.code]
        return f"{what} within {self.limit_s:g} s (router.deadlines); the request was aborted"


class RequestDeadlines:
    """Deadlines of one request, relative to its arrival at the router."""

    def __init__(
        self, config: DeadlineConfig, arrival_s: float, clock: Callable[[], float]
    ) -> None:
        self._config = config
        self._clock = clock
        self._first_token_at = arrival_s + config.first_token_seconds
        self._request_at = arrival_s + config.request_seconds

    def _tightest(self, *options: tuple[float, str, float]) -> Budget:
        now = self._clock()
        seconds, code, limit = min(options)
        return Budget(max(0.0, seconds - now), code, limit)

    def prefill(self) -> Budget:
        c = self._config
        now = self._clock()
        return self._tightest(
            (now + c.prefill_seconds, "prefill_timeout", c.prefill_seconds),
            (self._first_token_at, "first_token_timeout", c.first_token_seconds),
            (self._request_at, "request_timeout", c.request_seconds),
        )

    def first_token(self) -> Budget:
        c = self._config
        return self._tightest(
            (self._first_token_at, "first_token_timeout", c.first_token_seconds),
            (self._request_at, "request_timeout", c.request_seconds),
        )

    def next_chunk(self, streaming: bool) -> Budget:
        """After the first token: the idle gap (streaming only) or the request's end."""
        c = self._config
        idle = self._clock() + c.stream_idle_seconds if streaming else math.inf
        return self._tightest(
            (idle, "stream_idle_timeout", c.stream_idle_seconds),
            (self._request_at, "request_timeout", c.request_seconds),
        )
