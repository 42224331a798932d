"""EngineLiveness: an engine that stops answering pings becomes unresponsive, and recovers."""

from __future__ import annotations

from pdserve.engine.liveness import EngineLiveness


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_silence_past_the_bound_is_unresponsive_and_an_answer_recovers_it() -> None:
    clock = Clock()
    live = EngineLiveness(unresponsive_after_s=5.0, clock=clock)
    assert not live.unresponsive
    for _ in range(20):  # pings answered every second: never unresponsive
        clock.now_s += 1.0
        live.answered()
        assert not live.unresponsive
    clock.now_s += 5.0
    assert not live.unresponsive  # exactly at the bound: not yet
    clock.now_s += 0.5
    assert live.unresponsive
    assert "5.5 s" in live.describe()
    live.answered()  # e.g. SIGCONT: it answers again
    assert not live.unresponsive
    assert live.silent_for_s() == 0.0


def test_an_unresponsive_engine_is_replaced_only_after_the_routers_were_told() -> None:
    clock = Clock()
    live = EngineLiveness(
        unresponsive_after_s=5.0,
        clock=clock,
        replace_after_announce_s=3.0,
        replace_unannounced_after_s=15.0,
    )
    clock.now_s += 6.0
    assert live.unresponsive and not live.replace  # unhealthy, not yet told to anyone
    live.announced()  # a routing-stats poll said healthy: false
    clock.now_s += 2.9
    live.announced()  # later polls do not restart the grace
    assert not live.replace
    clock.now_s += 0.1
    assert live.replace
    live.answered()  # it came back: neither unresponsive nor announced any more
    assert not live.unresponsive and not live.replace
    clock.now_s += 6.0
    assert live.unresponsive and not live.replace  # a new silence needs a new announcement


def test_an_unresponsive_engine_nobody_polls_is_replaced_past_the_bound_plus_grace() -> None:
    clock = Clock()
    live = EngineLiveness(unresponsive_after_s=5.0, clock=clock, replace_unannounced_after_s=15.0)
    clock.now_s += 20.0
    assert live.unresponsive and not live.replace
    clock.now_s += 0.5
    assert live.replace
