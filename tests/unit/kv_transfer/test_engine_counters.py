"""A replica's engine counters fold the verified connector's integrity stats (pure)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pdserve.engine.stats import EngineCounters
from pdserve.kv_transfer.verified_stats import IntegrityCounts


def step(connector: dict[str, Any]) -> SimpleNamespace:
    return SimpleNamespace(
        num_running_reqs=0, num_waiting_reqs=0, kv_cache_usage=0.0, kv_connector_stats=connector
    )


def test_checks_failures_and_late_notifications_are_counted_and_verdicts_read_once() -> None:
    counters = EngineCounters()
    counts = IntegrityCounts()
    counts.check()
    counts.check()
    counts.failure("stale", "req-7-d")
    data = {**counts.take(), "num_notifications_after_expiry": [1, 1]}
    counters.record(step(data), None)
    report = counters.integrity()
    assert report["checks"] == 2 and report["notifications_after_expiry"] == 2
    assert report["failures"] == {"digest": 0, "identity": 0, "stale": 1, "unverifiable": 0}
    assert counters.take_verdict("req-7-d") == "stale"
    assert counters.take_verdict("req-7-d") is None  # read once
    assert counters.take_verdict("other") is None
