"""The cpu_host block's effects, each on its own against the exact simulation: the loaded step
extra and the host's speed per 50 ms window, host-wide stalls, hops that stretch with the busy
cores, the spreads of the client's time, of each stream chunk and of a local prefill's hops,
and a decode replica taking its local prompts in one at a time."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.cost_model import CostModel
from pdserve.sim.cpu_host import CpuHost
from pdserve.sim.host import STEP_SPEED_PERIOD_S
from pdserve.sim.outcome import SimResult
from pdserve.sim.profile import SimProfile
from pdserve.sim.simulator import Simulation
from pdserve.sim.workload import SimRequest
from tests.unit.sim.helpers import BLOCK, COST, PROFILE, layout, prefill_s, request


def test_every_engine_step_pays_the_loaded_host_s_extra() -> None:
    """engine_step_extra_s: the prompt's step and each decode step take it on top."""
    extra = 0.002
    loaded = PROFILE.with_host_terms(engine_step_extra_s=extra)
    [r] = Simulation(layout(), loaded).run([request(0, 1000, out=3)]).results
    assert r.ttft_s == pytest.approx(PROFILE.router_s + 2 * PROFILE.hop_s + prefill_s(1000) + extra)
    step = COST.est_decode_step_s(1, 0) + extra
    assert r.chunk_gaps_s == pytest.approx((step, step))


def test_engine_steps_run_at_the_host_s_speed_of_their_50_ms_window() -> None:
    """step_speed_sigma: each STEP_SPEED_PERIOD_S window of the clock draws one log-normal
    speed factor (median 1) that every step started in it takes, the prompt's included (its
    window's is the seed's first draw); the draws follow the seed."""
    sigma = 0.4
    wandering = PROFILE.with_host_terms(step_speed_sigma=sigma)
    req = [request(0, 1000, out=2001)]
    [steady] = Simulation(layout(), PROFILE).run(req).results
    [r] = Simulation(layout(), wandering, seed=3).run(req).results
    first_factor = math.exp(random.Random("step-speed-3").gauss(0.0, sigma))
    prompt_s = steady.ttft_s - PROFILE.router_s - 2 * PROFILE.hop_s
    assert r.ttft_s == pytest.approx(steady.ttft_s + prompt_s * (first_factor - 1))
    step = COST.est_decode_step_s(1, 0)
    assert steady.chunk_gaps_s == pytest.approx([step] * 2000)
    factors = [gap / step for gap in r.chunk_gaps_s]
    # A decode step starts when the one before it ended: one hop before its token arrived.
    first_start_s = r.sent_s + r.ttft_s - PROFILE.hop_s
    starts_s = itertools.accumulate([first_start_s, *r.chunk_gaps_s[:-1]])
    by_window: dict[int, set[float]] = {}
    for start_s, f in zip(starts_s, factors, strict=True):
        by_window.setdefault(math.floor(start_s / STEP_SPEED_PERIOD_S), set()).add(round(f, 9))
    assert len(by_window) > 100
    assert all(len(fs) == 1 for fs in by_window.values())  # one factor per window
    logs = [math.log(next(iter(fs))) for fs in by_window.values()]
    assert abs(statistics.median(logs)) < 0.1 and 0.3 < statistics.stdev(logs) < 0.5
    [again] = Simulation(layout(), wandering, seed=3).run(req).results
    [other] = Simulation(layout(), wandering, seed=4).run(req).results
    assert again.chunk_gaps_s == r.chunk_gaps_s and other.chunk_gaps_s != r.chunk_gaps_s


def test_without_the_block_the_simulation_is_exact_and_draws_nothing() -> None:
    """A profile without cpu_host simulates as the neutral block does, whatever the seed:
    no spread, no stall, no speed factor."""
    requests = [request(i, 200 + 40 * i, out=6, at=0.01 * i) for i in range(40)]
    lay = layout(num_prefill=1)
    runs = [
        Simulation(lay, prof, seed=seed).run(requests).results
        for prof, seed in ((PROFILE, 0), (PROFILE, 7), (PROFILE.with_host(CpuHost()), 3))
    ]
    times = [[(r.ttft_s, r.chunk_gaps_s, r.stages) for r in rs] for rs in runs]
    assert times[0] == times[1] == times[2]
    assert PROFILE.cpu_host is None and PROFILE.host == CpuHost()


def test_ten_thousand_requests_take_seconds() -> None:
    import time

    rng = random.Random(1)
    requests = [request(i, rng.choice([50, 1500]), out=32, at=i * 0.25) for i in range(10_000)]
    # With the host's stalls too (3 per second: about 7,500 over the run).
    stalled = PROFILE.with_host_terms(host_stall_rate_per_s=3.0, host_stall_median_s=0.01)
    t0 = time.perf_counter()
    out = Simulation(layout(num_prefill=1), stalled, concurrency=32).run(requests)
    assert len(out.results) == 10_000 and all(r.e2e_s for r in out.results)
    assert time.perf_counter() - t0 < 30


def _stalled(rate_per_s: float, length_s: float) -> SimProfile:
    """PROFILE with host stalls of one fixed length."""
    update = {
        "host_stall_rate_per_s": rate_per_s,
        "host_stall_median_s": length_s,
        "host_stall_sigma": 0.0,
    }
    return PROFILE.with_host_terms(**update)


def test_a_host_stall_delays_the_work_in_flight_by_its_length() -> None:
    """Lone requests (one every 10 s) and stalls of 50 ms at 2 per second: a request is
    delayed by a whole number of stalls, and by none with probability exp(-rate x the time
    its work is in flight), the Poisson process's closed form; sends keep their schedule."""
    rate_per_s, length_s, n = 2.0, 0.05, 2000
    requests = [request(i, 1000, at=10.0 * i) for i in range(n)]
    alone = PROFILE.router_s + 2 * PROFILE.hop_s + prefill_s(1000)
    in_flight_s = alone - PROFILE.hop_s  # the chunk's hop back is fixed when it is produced
    results = Simulation(layout(), _stalled(rate_per_s, length_s), seed=3).run(requests).results
    delays = [(r.ttft_s or 0.0) - alone for r in results]
    assert all(r.sent_s == 10.0 * i for i, r in enumerate(results))
    stalls = [d / length_s for d in delays]
    assert all(k == pytest.approx(round(k), abs=1e-6) and round(k) >= 0 for k in stalls)
    undelayed = sum(1 for k in stalls if round(k) == 0) / n
    assert undelayed == pytest.approx(math.exp(-rate_per_s * in_flight_s), abs=0.03)
    assert max(stalls) >= 2  # a stall can land in a window another one stretched


def test_without_stalls_the_draws_are_unchanged() -> None:
    """A rate of 0 draws nothing: every other random draw, and so every result, is the same
    as a profile that never heard of stalls."""
    prof = PROFILE.with_host_terms(decode_jitter_sigma=0.5, client_jitter_sigma=0.3)
    requests = [request(i, 200 + 10 * i, out=8, at=0.05 * i) for i in range(50)]
    zero = prof.with_host_terms(host_stall_rate_per_s=0.0, host_stall_median_s=0.02)
    a = Simulation(layout(num_prefill=1), prof, seed=5).run(requests).results
    b = Simulation(layout(num_prefill=1), zero, seed=5).run(requests).results
    assert [(r.ttft_s, r.chunk_gaps_s) for r in a] == [(r.ttft_s, r.chunk_gaps_s) for r in b]
    stalled = prof.with_host_terms(host_stall_rate_per_s=5.0, host_stall_median_s=0.02)
    c = Simulation(layout(num_prefill=1), stalled, seed=5).run(requests).results
    assert sum(r.e2e_s or 0 for r in c) > sum(r.e2e_s or 0 for r in a)


def test_a_stall_stretches_a_stream_s_gap_and_a_kv_pull_waits_it_out() -> None:
    """A closed loop of remote prefills under frequent stalls: every request completes, and
    the largest stream gap is at least one stall longer than a decode step."""
    lay = layout(num_prefill=1, policy=PolicyConfig(block_size_tokens=BLOCK))
    requests = [request(i, 2000, out=16, at=None) for i in range(40)]
    out = Simulation(lay, _stalled(20.0, 0.03), concurrency=2, seed=1).run(requests)
    assert all(r.e2e_s is not None for r in out.results)
    step = COST.est_decode_step_s(1, 2000)
    assert max(g for r in out.results for g in r.chunk_gaps_s) >= step + 0.03 - 1e-9


def test_serving_times_grow_with_busy_host_cores() -> None:
    prof = PROFILE.with_host_terms(host_cores=2, host_contention=3.0)
    assert prof.host.serving_s(0.004, 0) == pytest.approx(0.004)
    assert prof.host.serving_s(0.004, 1) == pytest.approx(0.004 * 2.5)
    assert prof.host.serving_s(0.004, 5) == pytest.approx(0.004 * 4)  # capped at every core
    assert PROFILE.host.serving_s(0.004, 2) == 0.004  # no block: the serving layer's own CPUs
    # B is dispatched, and later handed off, while A's long prompt occupies p0's core: one of
    # two host cores busy, so each of B's three remote-path hops takes 1 + 3.0 x 1/2 times as
    # long. Its KV transfer does not stretch.
    pair = [request(0, 8000, out=2), request(1, 2000, out=2, at=0.01)]
    lay = layout(
        num_prefill=2,
        policy=PolicyConfig(block_size_tokens=BLOCK, lanes=False, spill_max_decode_prefill_s=0),
    )
    idle = Simulation(lay, PROFILE).run(pair).results[1]
    loaded = Simulation(lay, prof).run(pair).results[1]
    assert idle.decision is not None and idle.decision.prefill_replica_id == "p1"
    assert idle.ttft_s is not None and loaded.ttft_s is not None
    assert loaded.ttft_s - idle.ttft_s == pytest.approx(1.5 * 3 * PROFILE.hop_s)


def test_the_time_outside_the_router_spreads_once_per_request() -> None:
    """client_jitter_sigma: each request's client time is its own log-normal draw (median
    client_s), added to its first and last chunk alike, so E2E - TTFT does not move."""
    sigma = 0.6
    prof = PROFILE.with_host_terms(client_s=0.01, client_jitter_sigma=sigma)
    requests = [request(i, 1000, out=3, at=i * 1.0) for i in range(3000)]  # one at a time
    exact = Simulation(layout(), PROFILE).run(requests[:1]).results[0]
    results = Simulation(layout(), prof, seed=4).run(requests).results
    assert exact.ttft_s is not None and exact.e2e_s is not None
    client = sorted((r.ttft_s or 0.0) - exact.ttft_s for r in results)
    p50, p99 = client[len(client) // 2], client[int(0.99 * len(client))]
    assert p50 == pytest.approx(0.01, rel=0.05)
    assert p99 / p50 == pytest.approx(math.exp(2.3263 * sigma), rel=0.15)
    for r in results:
        assert (r.e2e_s or 0.0) - (r.ttft_s or 0.0) == pytest.approx(exact.e2e_s - exact.ttft_s)


def test_each_stream_chunk_pays_its_own_hop_and_never_overtakes_the_one_ahead() -> None:
    """With a spread on the decode path each chunk's hop is drawn on its own: gaps vary
    around the engine's step, never go negative, and add up to the stream's span."""
    prof = PROFILE.with_host_terms(decode_jitter_sigma=1.5)
    [exact] = Simulation(layout(), PROFILE).run([request(0, 64, out=40)]).results
    [r] = Simulation(layout(), prof, seed=3).run([request(0, 64, out=40)]).results
    step = COST.est_decode_step_s(1, 0)
    assert exact.chunk_gaps_s == pytest.approx((step,) * 39)
    assert len(r.chunk_gaps_s) == 39 and min(r.chunk_gaps_s) >= 0
    assert max(r.chunk_gaps_s) > 2 * step  # a slow hop delays a chunk ...
    assert min(r.chunk_gaps_s) < 0.5 * step  # ... and the next one catches up
    assert r.ttft_s is not None and r.e2e_s is not None
    assert sum(r.chunk_gaps_s) == pytest.approx(r.e2e_s - r.ttft_s)


def test_local_prefills_take_the_local_spread_up_to_their_first_token() -> None:
    """`local_jitter_sigma` replaces `decode_jitter_sigma` for the hops before a local
    prefill's first token (what the fit measures: decode_hops); its later chunks stream like
    any other request's. With one of the two at 0, those times are exact."""
    policy = PolicyConfig(block_size_tokens=BLOCK, local_prefill_max_cold_tokens=128)
    lay = layout(num_prefill=1, policy=policy)
    short, long = request(0, 64, out=3), request(1, 2000, out=3)
    [exact_short] = Simulation(lay, PROFILE).run([short]).results
    [exact_long] = Simulation(lay, PROFILE).run([long]).results
    assert exact_short.local_prefill and not exact_long.local_prefill

    def run(req: SimRequest, **sigmas: float) -> SimResult:
        prof = PROFILE.with_host_terms(**sigmas)
        [r] = Simulation(lay, prof, seed=1).run([req]).results
        return r

    # A local spread only: the remote request is exact, the local one's first token is not,
    # and its later chunks are.
    r = run(long, decode_jitter_sigma=0.0, local_jitter_sigma=2.0)
    assert r.ttft_s == pytest.approx(exact_long.ttft_s)
    assert r.chunk_gaps_s == pytest.approx(exact_long.chunk_gaps_s)
    r = run(short, decode_jitter_sigma=0.0, local_jitter_sigma=2.0)
    assert r.ttft_s != pytest.approx(exact_short.ttft_s)
    assert r.e2e_s - r.ttft_s <= exact_short.e2e_s - exact_short.ttft_s  # type: ignore[operator]
    # A decode spread only: the local request's first token is exact, the remote one's not.
    r = run(short, decode_jitter_sigma=2.0, local_jitter_sigma=0.0)
    assert r.ttft_s == pytest.approx(exact_short.ttft_s)
    assert r.chunk_gaps_s != pytest.approx(exact_short.chunk_gaps_s)
    r = run(long, decode_jitter_sigma=2.0, local_jitter_sigma=0.0)
    assert r.ttft_s != pytest.approx(exact_long.ttft_s)
    # Without a local spread of its own, a local prefill takes the decode path's.
    r = run(short, decode_jitter_sigma=2.0)
    assert r.ttft_s != pytest.approx(exact_short.ttft_s)


def test_a_replica_takes_its_local_prompts_in_one_at_a_time() -> None:
    """local_intake_per_token_s: a local prompt's hop to its replica takes its tokens' intake
    on top; two sent together to one replica: the second's starts when the first's ends.
    (Engine work made negligible so the intake alone sets the TTFTs.)"""
    quick = CostModel(
        fixed_overhead_s=0.0,
        per_token_s=1e-9,
        per_token_sq_s=0.0,
        kv_transfer_per_token_s=0.0,
        decode_base_s=1e-6,
        decode_per_seq_s=0.0,
        decode_per_context_token_s=0.0,
    )
    steady = PROFILE.model_copy(update={"cost_model": quick})
    taking = steady.with_host_terms(local_intake_per_token_s=1e-4)
    [alone_steady] = Simulation(layout(), steady).run([request(0, 1000)]).results
    [alone] = Simulation(layout(), taking).run([request(0, 1000)]).results
    assert alone.ttft_s == pytest.approx(alone_steady.ttft_s + 0.1, abs=1e-4)
    first, second = Simulation(layout(), taking).run([request(0, 1000), request(1, 500)]).results
    assert first.ttft_s == pytest.approx(alone.ttft_s, abs=1e-4)
    assert second.ttft_s == pytest.approx(alone_steady.ttft_s + 0.1 + 0.05, abs=1e-4)
    # Two replicas take their prompts in side by side.
    both = Simulation(layout(num_decode=2), taking).run([request(0, 1000), request(1, 1000)])
    assert {r.decision.decode_replica_id for r in both.results if r.decision} == {"d0", "d1"}
    assert [r.ttft_s for r in both.results] == pytest.approx([alone.ttft_s] * 2, abs=1e-4)
