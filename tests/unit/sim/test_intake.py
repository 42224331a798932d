"""The serving layer's intake (sim/intake.py): busy stretches first in first out, and what
passes through them."""

from __future__ import annotations

import math
import statistics

import pytest

from pdserve.sim.host import HostEffects
from pdserve.sim.intake import Intake
from pdserve.sim.simulator import Simulation
from tests.unit.sim.helpers import PROFILE, layout, request


def test_prompts_that_arrive_together_are_taken_in_one_after_the_other() -> None:
    intake = Intake()
    intake.take_in("a", 1.0, 0.02)
    intake.take_in("b", 1.005, 0.03)  # waits for a's work: busy 1.02-1.05
    assert intake.passes_at("x", 1.01) == pytest.approx(1.05)  # a's stretch, then b's
    assert intake.passes_at("x", 1.03) == pytest.approx(1.05)
    assert intake.passes_at("x", 0.99) == pytest.approx(0.99)  # before it
    assert intake.passes_at("x", 1.05) == pytest.approx(1.05)  # at its end
    assert intake.passes_at("x", 2.0) == pytest.approx(2.0)


def test_a_request_is_not_held_up_by_its_own_prompt() -> None:
    intake = Intake()
    intake.take_in("a", 0.0, 0.01)
    assert intake.passes_at("a", 0.005) == pytest.approx(0.005)
    intake.take_in("b", 0.002, 0.01)  # 0.01-0.02, queued behind a's
    assert intake.passes_at("a", 0.012) == pytest.approx(0.02)  # b's holds a up
    assert intake.passes_at("b", 0.005) == pytest.approx(0.01)  # a's holds b up, not b's own


def test_an_idle_intake_and_no_work_hold_nothing_up() -> None:
    intake = Intake()
    intake.take_in("a", 0.0, 0.0)
    assert intake.passes_at("x", 0.0) == 0.0
    intake.take_in("a", 1.0, 0.01)
    intake.take_in("b", 3.0, 0.01)  # the intake was free again: starts at its arrival
    assert intake.passes_at("x", 2.0) == pytest.approx(2.0)
    assert intake.passes_at("x", 3.001) == pytest.approx(3.01)


def test_a_prompt_taken_in_holds_up_the_first_chunk_of_a_request_in_flight() -> None:
    """The serving layer takes a prompt in for its per-token router and client time (here
    2,000 tokens x 10 us = 20 ms); the first chunk of another request that reaches the router
    in that stretch waits for its end. The prompt's own request is not held up by it, and a
    prompt sent after the first chunk passed holds up nothing."""
    prof = PROFILE.with_host_terms(router_s=0.002, router_per_token_s=1e-5)
    one = layout()
    short, long_at = request(0, 16), 0.001
    [alone] = Simulation(one, prof).run([short]).results
    assert alone.ttft_s is not None and alone.ttft_s > long_at  # in flight when it arrives
    both = Simulation(one, prof).run([short, request(1, 2000, at=long_at)]).results
    held, burst = both
    # The long prompt reaches an engine after its router time (20 ms of it per token), when
    # the short one's token is out: they share no engine step, only the serving layer.
    assert burst.sent_s + burst.stages["router_queue"] > alone.ttft_s
    assert held.ttft_s == pytest.approx(long_at + prof.host.intake_s(2000))
    [long_alone] = Simulation(one, prof).run([request(1, 2000, at=long_at)]).results
    assert burst.ttft_s == pytest.approx(long_alone.ttft_s)
    later = Simulation(one, prof).run([short, request(1, 2000, at=0.05)]).results
    assert later[0].ttft_s == pytest.approx(alone.ttft_s)


def test_each_prompt_s_intake_spreads_as_the_client_s_time_with_its_mean_kept() -> None:
    """With a client spread (`client_jitter_sigma`), each prompt's intake is drawn log-normal
    around the profile's `intake_s`, scaled so that its mean stays that value: over many
    prompts the work taken in is the fitted one, its median below it, and some prompts hold
    twice as long. Without a spread, every prompt's intake is exactly `intake_s`."""
    sigma = 0.5
    prof = PROFILE.with_host_terms(
        router_s=0.002, router_per_token_s=1e-5, client_jitter_sigma=sigma
    )
    host = HostEffects(prof.host, seed=3)
    draws = [host.intake_s(2000) for _ in range(20_000)]
    mean_s = prof.host.intake_s(2000)
    assert statistics.fmean(draws) == pytest.approx(mean_s, rel=0.02)
    assert statistics.median(draws) == pytest.approx(mean_s * math.exp(-(sigma**2) / 2), rel=0.03)
    assert max(draws) > 2 * mean_s
    exact = HostEffects(
        PROFILE.with_host_terms(router_s=0.002, router_per_token_s=1e-5).host, seed=3
    )
    assert {exact.intake_s(2000) for _ in range(10)} == {prof.host.intake_s(2000)}
