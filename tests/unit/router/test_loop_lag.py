"""The router's event-loop lag sampler: it reports how late its sleeps wake, on a real loop
blocked for real, and the app runs it from its first request to shutdown into
pdserve_router_event_loop_lag_seconds."""

from __future__ import annotations

import asyncio
import time

import pytest
from fastapi.testclient import TestClient

from pdserve.config import PdserveConfig
from pdserve.router.loop_lag import LoopLagSampler
from pdserve.router.metrics import RouterMetrics
from tests.unit.router.fakes import FakeDispatcher, placer, router_app

LAG_COUNT = "pdserve_router_event_loop_lag_seconds_count"


async def test_a_blocked_loop_shows_as_the_lag_of_the_next_wake_up() -> None:
    lags: list[float] = []
    task = asyncio.get_running_loop().create_task(LoopLagSampler(lags.append, 0.01).run())
    await asyncio.sleep(0.1)
    time.sleep(0.3)  # block the loop, as a synchronous import or a full collection does
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert max(lags) >= 0.25
    assert sorted(lags)[len(lags) // 2] < 0.05, "an idle loop wakes on time"


async def test_lateness_is_what_the_clock_says_beyond_the_interval() -> None:
    now = [100.0]
    woke_after = iter([0.05, 0.05, 0.45, 0.04])  # the last one early: reported as 0, not < 0
    lags: list[float] = []

    async def sleep(seconds: float) -> None:
        assert seconds == 0.05
        now[0] += next(woke_after)  # StopIteration ends the run

    sampler = LoopLagSampler(lags.append, 0.05, clock=lambda: now[0], sleep=sleep)
    with pytest.raises(RuntimeError):  # a coroutine raising StopIteration
        await sampler.run()
    assert lags == pytest.approx([0.0, 0.0, 0.4, 0.0])


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        LoopLagSampler(lambda _: None, 0)


def test_the_app_samples_its_loop_from_its_first_request_to_shutdown() -> None:
    config = PdserveConfig.model_validate({})
    dispatcher = FakeDispatcher()
    the_placer = placer()
    metrics = RouterMetrics()
    app = router_app(config, dispatcher, the_placer, metrics)
    with TestClient(app) as client:  # runs the lifespan, on the client's own loop thread
        time.sleep(0.2)
        assert metrics.registry.get_sample_value(LAG_COUNT) == 0, "no request yet: no samples"
        client.get("/health")
        time.sleep(0.3)
        text = client.get("/metrics").text
    running = metrics.registry.get_sample_value(LAG_COUNT) or 0.0
    assert f"{LAG_COUNT} " in text
    assert running >= 3, "about six 50 ms wake-ups in 0.3 s"
    time.sleep(0.2)
    assert metrics.registry.get_sample_value(LAG_COUNT) == running, "stopped at shutdown"
