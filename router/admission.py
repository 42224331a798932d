"""Admission control (pure): refuse work a tier cannot take soon, fast, with a Retry-After.

Called per request by the in-flight gate (router/inflight.py: the router in-flight bound,
before the body is parsed) and by the `Placer` once the policy has chosen replicas (prefill
backlog and decode stream bounds, from the router's own bookkeeping). A refusal is an
`AdmissionRejected` (HTTP 429, OpenAI code `rate_limit_exceeded`, a `Retry-After` header: at
least the prefill backlog's excess, raised to the `RetryAfterAdvisor`'s advice) that the
observer counts in `pdserve_requests_rejected_total{reason}`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pdserve.names import RejectReason
from pdserve.router.errors import OpenAIError


class AdmissionRejected(OpenAIError):
    """429: the request was not admitted; retry after `retry_after_s` (whole seconds, >= 1)."""

    def __init__(self, reason: RejectReason, message: str, retry_after_s: float):
        super().__init__(429, message, code="rate_limit_exceeded")
        self.reason: RejectReason = reason
        self._why = message
        self.retry_after_s = 0
        self.at_least(retry_after_s)

    def at_least(self, retry_after_s: float) -> None:
        """Advise waiting at least `retry_after_s` (Retry-After header and message)."""
        seconds = max(1, self.retry_after_s, math.ceil(retry_after_s))
        self.retry_after_s = seconds
        self.message = f"{self._why}; retry in about {seconds} s"
        self.headers = {"retry-after": str(seconds)}


class RetryAfterAdvisor:
    """How long refused clients should wait, from what the router sees (pure; clock injected).

    A client that honours Retry-After comes back T seconds later, so with many clients
    refused the router sees refusals at about (clients waiting) / T per second, while it
    admits new work only as fast as requests end. Once per `window_s` the advice moves
    toward the T at which refused clients return `retries_per_slot` times as fast as slots
    free up (more than one retry per free slot, so slots do not sit idle waiting for one):
    T <- clamp(T x refusals / (retries_per_slot x completions), 1, max_s) over the last
    window (at most x2 or /2 per window; T relaxes toward 1 s when nothing is refused).
    Without it every refused client retries each second and, at 10x overload, refusals
    outnumber admissions ~10:1, burning the router's CPU on refusals.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        window_s: float = 2.0,
        max_s: float = 30.0,
        retries_per_slot: float = 3.0,
    ) -> None:
        if window_s <= 0 or max_s < 1 or retries_per_slot <= 0:
            raise ValueError(
                f"need window_s > 0, max_s >= 1, retries_per_slot > 0; got "
                f"{window_s}, {max_s}, {retries_per_slot}"
            )
        self._clock = clock
        self._window_s = window_s
        self._max_s = max_s
        self._retries_per_slot = retries_per_slot
        self._advice_s = 1.0
        self._window_start_s = clock()
        self._refused = 0
        self._completed = 0

    def completed(self) -> None:
        """An admitted request ended (its slot is free)."""
        self._roll()
        self._completed += 1

    def refused(self) -> None:
        """A request was refused with 429."""
        self._roll()
        self._refused += 1

    def retry_after_s(self) -> float:
        self._roll()
        return self._advice_s

    def _roll(self) -> None:
        now = self._clock()
        if now - self._window_start_s < self._window_s:
            return
        if self._refused == 0:
            target = 1.0
        else:
            ratio = self._refused / (self._retries_per_slot * max(1, self._completed))
            target = self._advice_s * ratio
        step = min(2.0, max(0.5, target / self._advice_s))
        self._advice_s = min(self._max_s, max(1.0, self._advice_s * step))
        self._window_start_s = now
        self._refused = self._completed = 0


def check_inflight(num_inflight: int, limit: int | None) -> None:
    """Raise unless one more request fits under the router's in-flight bound."""
    if limit is not None and num_inflight >= limit:
        raise AdmissionRejected(
            "router_inflight",
            f"the router is serving its maximum of {limit} requests "
            "(router.admission.max_inflight_requests)",
            1.0,
        )


def check_prefill_backlog(
    replica_id: str, backlog_s: float, est_prefill_s: float, limit_s: float | None
) -> None:
    """Raise if sending a prefill estimated at `est_prefill_s` would push the replica's
    queued estimate past `limit_s`. An idle replica (no backlog) always takes one."""
    if limit_s is None or backlog_s <= 0.0 or backlog_s + est_prefill_s <= limit_s:
        return
    raise AdmissionRejected(
        "prefill_backlog",
        f"replica {replica_id} has {backlog_s:.1f} s of prefill queued "
        f"(router.admission.max_prefill_backlog_seconds: {limit_s:g})",
        backlog_s + est_prefill_s - limit_s,
    )


def check_decode_streams(replica_id: str, num_streams: int, limit: int | None) -> None:
    """Raise unless the decode replica can take one more stream from this router."""
    if limit is not None and num_streams >= limit:
        raise AdmissionRejected(
            "decode_streams",
            f"decode replica {replica_id} is streaming its maximum of {limit} requests "
            "(router.admission.max_decode_streams)",
            1.0,
        )
