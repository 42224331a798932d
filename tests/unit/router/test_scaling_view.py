"""The router's side of autoscaling: the elastic pools' documents, read at most once per
interval, become the pdserve_pool_* gauges and scale-event counters on /metrics (each event
counted once however often it is read)."""

from __future__ import annotations

import asyncio

from pdserve.autoscaling.journal import PoolScaling, ScaleEvent
from pdserve.names import PoolName
from pdserve.router.metrics import RouterMetrics
from pdserve.router.observe import RouterObserver
from pdserve.router.scaling import ScalingView


def _doc(target: int, events: tuple[ScaleEvent, ...] = ()) -> PoolScaling:
    return PoolScaling(
        pool="prefill", current_replicas=1, target_replicas=target, wanted_replicas=3,
        signal=2.5, signal_target=0.5, reason="r", updated_unix_s=1.0, events=events,
    )  # fmt: skip


def test_documents_are_read_once_per_interval_and_only_for_elastic_pools() -> None:
    reads: list[tuple[str, PoolName]] = []
    now = [0.0]

    def read(app: str, pool: PoolName) -> PoolScaling | None:
        reads.append((app, pool))
        return _doc(2)

    view = ScalingView("app", ("prefill",), read, max_age_s=1.0, clock=lambda: now[0])
    assert asyncio.run(view.current())["prefill"].target_replicas == 2
    asyncio.run(view.current())
    now[0] = 1.5
    asyncio.run(view.current())
    assert reads == [("app", "prefill"), ("app", "prefill")]
    assert asyncio.run(ScalingView("app", (), read).current()) == {}


def test_scaling_metrics_follow_the_documents_and_count_each_event_once() -> None:
    metrics = RouterMetrics()
    observer = RouterObserver(metrics, None)
    up = ScaleEvent(unix_s=10.0, from_replicas=1, to_replicas=2, reason="busy")
    down = ScaleEvent(unix_s=50.0, from_replicas=2, to_replicas=1, reason="idle")
    observer.update_scaling({"prefill": _doc(2, (up,))})
    observer.update_scaling({"prefill": _doc(2, (up,))})
    observer.update_scaling({"prefill": _doc(1, (up, down))})

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"pool": "prefill", **labels})

    assert sample("pdserve_pool_scale_events_total", direction="up") == 1
    assert sample("pdserve_pool_scale_events_total", direction="down") == 1
    assert sample("pdserve_pool_target_replicas") == 1
    assert sample("pdserve_pool_wanted_replicas") == 3
    assert (sample("pdserve_pool_scaling_signal"), sample("pdserve_pool_scaling_target")) == (
        2.5, 0.5,
    )  # fmt: skip
