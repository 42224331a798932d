"""Integrity counters of one engine process, carried in vLLM's KV-connector stats (pure).

The verified connector's scheduler and worker halves count into an `IntegrityCounts`; each
engine step, the connector moves them into the step's KV-connector stats dict under the keys
below (vLLM sends that dict to the replica's stat logger, pdserve.engine.stats, which turns it
into pdserve_kv_integrity_* and the per-request `recomputed` verdicts).
"""

from __future__ import annotations

from typing import Any

from pdserve.kv_transfer.integrity import FAILURE_REASONS, FailureReason

CHECKS_KEY = "pdserve_integrity_checks"
"""One entry (1) per verified handoff a decode engine received."""
FAILED_KEY = "pdserve_integrity_failed"
"""One entry per handoff not used: [external request id, reason]."""
KEYS = (CHECKS_KEY, FAILED_KEY)


class IntegrityCounts:
    """Checks and failures since the last `take()`. Not thread-safe (one per connector half;
    each is called from one thread)."""

    def __init__(self) -> None:
        self._checks = 0
        self._failed: list[list[str]] = []

    def check(self) -> None:
        self._checks += 1

    def failure(self, reason: FailureReason, request_id: str) -> None:
        if reason not in FAILURE_REASONS:
            raise ValueError(f"unknown integrity failure reason {reason!r}")
        self._failed.append([request_id, reason])

    def empty(self) -> bool:
        return not self._checks and not self._failed

    def take(self) -> dict[str, list[Any]]:
        """The counts as stats-dict lists, and start again from zero."""
        out: dict[str, list[Any]] = {CHECKS_KEY: [1] * self._checks, FAILED_KEY: self._failed}
        self._checks, self._failed = 0, []
        return out
