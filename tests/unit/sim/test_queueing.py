"""The simulator against closed-form cases: one request alone, an M/G/1 queue
(Pollaczek-Khinchine), a closed loop, a decode batch, a shared device, a KV handoff."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.cost_model import CostModel
from pdserve.sim.engine import EngineLimits
from pdserve.sim.host_speed import STEP_SPEED_PERIOD_S
from pdserve.sim.layout import EngineSpec, SimLayout
from pdserve.sim.outcome import SimResult
from pdserve.sim.profile import SimProfile
from pdserve.sim.simulator import Simulation
from pdserve.sim.stream import coalesce_times
from pdserve.sim.workload import SimRequest

BLOCK = 16
COST = CostModel(
    fixed_overhead_s=0.01,
    per_token_s=1e-4,
    per_token_sq_s=0.0,
    kv_transfer_per_token_s=1e-5,
    decode_base_s=0.005,
    decode_per_seq_s=0.001,
    decode_per_context_token_s=0.0,
)
PROFILE = SimProfile(cost_model=COST, router_s=0.002, hop_s=0.001, kv_transfer_fixed_s=0.004)


def limits(max_num_seqs: int = 64, chunk: int = 8192) -> EngineLimits:
    return EngineLimits(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=8192,
        chunk_tokens=chunk,
        block_size_tokens=BLOCK,
        kv_capacity_tokens=1 << 22,
    )


def layout(
    *,
    num_prefill: int = 0,
    num_decode: int = 1,
    max_num_seqs: int = 64,
    groups: tuple[str, ...] | None = None,
    interval_s: float = 0.0,
    policy: PolicyConfig | None = None,
) -> SimLayout:
    specs = [EngineSpec(f"p{i}", "prefill", limits(), f"p{i}") for i in range(num_prefill)]
    specs += [
        EngineSpec(f"d{i}", "decode", limits(max_num_seqs), f"d{i}") for i in range(num_decode)
    ]
    if groups is not None:
        specs = [
            EngineSpec(s.engine_id, s.pool, s.limits, g) for s, g in zip(specs, groups, strict=True)
        ]
    return SimLayout(
        name="t",
        aggregated=num_prefill == 0,
        engines=tuple(specs),
        policy=policy or PolicyConfig(block_size_tokens=BLOCK),
        stream_batch_interval_s=interval_s,
    )


def request(i: int, tokens: int, out: int = 1, at: float | None = 0.0) -> SimRequest:
    return SimRequest(
        f"r{i}", "all", at, tokens, out, tuple(range(i * 1000, i * 1000 + tokens // BLOCK))
    )


def prefill_s(tokens: int) -> float:
    return COST.fixed_overhead_s + COST.per_token_s * tokens


def test_one_request_alone_takes_exactly_its_modelled_path() -> None:
    [r] = Simulation(layout(), PROFILE).run([request(0, 1000, out=3)]).results
    ttft = PROFILE.router_s + 2 * PROFILE.hop_s + prefill_s(1000)
    assert r.ttft_s == pytest.approx(ttft)
    step = COST.est_decode_step_s(1, 0)
    assert r.chunk_gaps_s == pytest.approx((step, step))
    assert r.e2e_s == pytest.approx(ttft + 2 * step)


def test_every_engine_step_pays_the_loaded_host_s_extra() -> None:
    """engine_step_extra_s: the prompt's step and each decode step take it on top."""
    extra = 0.002
    loaded = PROFILE.model_copy(update={"engine_step_extra_s": extra})
    [r] = Simulation(layout(), loaded).run([request(0, 1000, out=3)]).results
    assert r.ttft_s == pytest.approx(PROFILE.router_s + 2 * PROFILE.hop_s + prefill_s(1000) + extra)
    step = COST.est_decode_step_s(1, 0) + extra
    assert r.chunk_gaps_s == pytest.approx((step, step))


def test_engine_steps_run_at_the_host_s_speed_of_their_50_ms_window() -> None:
    """step_speed_sigma: each STEP_SPEED_PERIOD_S window of the clock draws one log-normal
    speed factor (median 1) that every step started in it takes, the prompt's included (its
    window's is the seed's first draw); the draws follow the seed."""
    sigma = 0.4
    wandering = PROFILE.model_copy(update={"step_speed_sigma": sigma})
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


def test_a_remote_prefill_pays_the_hops_and_the_kv_transfer() -> None:
    lay = layout(num_prefill=1, policy=PolicyConfig(block_size_tokens=BLOCK))
    [r] = Simulation(lay, PROFILE).run([request(0, 2000, out=2)]).results
    assert r.decision is not None and r.decision.prefill_replica_id == "p0"
    expected = (
        PROFILE.router_s
        + PROFILE.hop_s  # router -> prefill
        + prefill_s(2000)
        + 2 * PROFILE.hop_s  # reply, router -> decode
        + PROFILE.kv_transfer_s(2000)
        + COST.est_decode_step_s(1, 2000)  # the decode engine's first step
        + PROFILE.hop_s  # token -> router
    )
    assert r.ttft_s == pytest.approx(expected)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_one_engine_serving_one_at_a_time_is_an_mg1_queue(rho: float) -> None:
    """max_num_seqs 1 and one output token: the engine serves prompts one by one, each for
    its prefill time. Mean wait in queue = lambda E[S^2] / (2 (1 - rho)) (Pollaczek-Khinchine).
    The round_robin policy keeps every engine priority at the client's (FCFS); pdserve's
    cost-bucket priorities would serve short prompts first and wait less on average."""
    rng = random.Random(7)
    lengths = [rng.randint(200, 2000) for _ in range(20_000)]
    service = [prefill_s(n) for n in lengths]
    mean_s = statistics.fmean(service)
    rate = rho / mean_s
    t, requests = 0.0, []
    for i, n in enumerate(lengths):
        requests.append(request(i, n, at=t))
        t += rng.expovariate(rate)
    out = Simulation(layout(max_num_seqs=1), PROFILE, policy="round_robin").run(requests)
    fixed = PROFILE.router_s + 2 * PROFILE.hop_s
    waits = [
        r.ttft_s - fixed - s
        for r, s in zip(out.results, service, strict=True)
        if r.ttft_s is not None
    ]
    theory = rate * statistics.fmean(s * s for s in service) / (2 * (1 - rho))
    assert statistics.fmean(waits) == pytest.approx(theory, rel=0.1)
    # pdserve's priorities put short prompts first: the mean wait drops below FCFS's.
    spt = Simulation(layout(max_num_seqs=1), PROFILE).run(requests)
    assert statistics.fmean(
        r.ttft_s - fixed - s for r, s in zip(spt.results, service, strict=True)
    ) < (0.97 * statistics.fmean(waits))


def test_a_closed_loop_of_one_serves_back_to_back() -> None:
    requests = [request(i, 1000, at=None) for i in range(50)]
    out = Simulation(layout(), PROFILE, concurrency=1).run(requests)
    each = PROFILE.router_s + 2 * PROFILE.hop_s + prefill_s(1000)
    assert out.wall_s == pytest.approx(50 * each)
    assert all(r.ttft_s == pytest.approx(each) for r in out.results)


def test_a_decode_batch_steps_together_and_the_stream_is_coalesced() -> None:
    """Eight streams prefilled in one step decode as one batch of 8: each step takes the
    cost model's step time for 8 sequences; a 20 ms stream interval merges tokens."""
    requests = [request(i, 64, out=10) for i in range(8)]
    out = Simulation(layout(), PROFILE).run(requests)
    step = COST.est_decode_step_s(8, 0)
    for r in out.results:
        assert r.chunk_gaps_s == pytest.approx((step,) * 9)
    coalesced = Simulation(layout(interval_s=0.02), PROFILE).run(requests)
    gaps = coalesced.results[0].chunk_gaps_s
    assert len(gaps) < 9 and min(gaps[:-1]) >= 0.02
    assert sum(gaps) == pytest.approx(sum(out.results[0].chunk_gaps_s))


def test_coalescing_keeps_first_and_last_and_waits_an_interval_between() -> None:
    assert coalesce_times([0.0, 0.01, 0.02, 0.03, 0.05, 0.06], 0.025) == [0.0, 0.03, 0.06]
    assert coalesce_times([1.0], 0.05) == [1.0]
    assert coalesce_times([0.0, 0.01, 0.02], 0.0) == [0.0, 0.01, 0.02]


def test_engines_sharing_one_device_run_at_half_speed_each() -> None:
    """Two engines pinned to one core, one long prompt each: a step started while the other
    engine is busy takes twice its time."""
    # The second arrives once the first is on d0, so the policy sends it to the idle d1.
    pair = [request(0, 4000), request(1, 4000, at=0.0025)]
    apart = Simulation(layout(num_decode=2), PROFILE).run(pair)
    shared = Simulation(layout(num_decode=2, groups=("core0", "core0")), PROFILE).run(pair)
    assert [r.decision.decode_replica_id for r in shared.results if r.decision] == ["d0", "d1"]
    fixed = PROFILE.router_s + 2 * PROFILE.hop_s
    alone = [r.ttft_s - fixed for r in apart.results if r.ttft_s]
    second = [r.ttft_s - fixed for r in shared.results if r.ttft_s][1]
    assert alone == pytest.approx([prefill_s(4000)] * 2)
    assert second == pytest.approx(2 * prefill_s(4000))  # started while d0 was busy


def test_the_router_decides_with_its_configured_cost_model() -> None:
    """The simulated router is the deployment's: it places with router.routing.cost_model,
    not with the profile's engine times. Four 1,500-token prompts at once on 1P1D whose
    engines prefill one in 35 ms: the default cost model (about 0.18 s per such prompt)
    predicts the last one's wait on the prefill engine far enough above a local prefill to
    spill it to the decode engine; a router configured with the engines' real costs predicts
    a gain under spill_min_gain_s and keeps all four remote."""
    fast = COST.model_copy(update={"fixed_overhead_s": 0.005, "per_token_s": 2e-5})
    profile = PROFILE.model_copy(update={"cost_model": fast})
    burst = [request(i, 1500) for i in range(4)]
    configured = PolicyConfig(block_size_tokens=BLOCK)
    knows_engines = PolicyConfig(block_size_tokens=BLOCK, cost_model=fast)
    spilled = Simulation(layout(num_prefill=1, policy=configured), profile).run(burst)
    kept = Simulation(layout(num_prefill=1, policy=knows_engines), profile).run(burst)
    assert sum(r.local_prefill for r in spilled.results) >= 1
    assert not any(r.local_prefill for r in kept.results)


def test_a_repeated_prefix_is_served_from_the_cache() -> None:
    conv = request(0, 3200, out=1)
    again = SimRequest("r1", "all", 5.0, 3200 + 320, 1, (*conv.block_hashes, 7001, 7002))
    out = Simulation(layout(num_decode=2), PROFILE).run([conv, again])
    first, second = out.results
    assert second.decision is not None and first.decision is not None
    assert second.decision.decode_replica_id == first.decision.decode_replica_id
    assert second.cached_tokens == 3200
    fixed = PROFILE.router_s + 2 * PROFILE.hop_s
    assert second.ttft_s == pytest.approx(fixed + prefill_s(320))


def test_ten_thousand_requests_take_seconds() -> None:
    import time

    rng = random.Random(1)
    requests = [request(i, rng.choice([50, 1500]), out=32, at=i * 0.25) for i in range(10_000)]
    # With the host's stalls too (3 per second: about 7,500 over the run).
    stalled = PROFILE.model_copy(update={"host_stall_rate_per_s": 3.0, "host_stall_median_s": 0.01})
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
    return PROFILE.model_copy(update=update)


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
    prof = PROFILE.model_copy(update={"decode_jitter_sigma": 0.5, "client_jitter_sigma": 0.3})
    requests = [request(i, 200 + 10 * i, out=8, at=0.05 * i) for i in range(50)]
    zero = prof.model_copy(update={"host_stall_rate_per_s": 0.0, "host_stall_median_s": 0.02})
    a = Simulation(layout(num_prefill=1), prof, seed=5).run(requests).results
    b = Simulation(layout(num_prefill=1), zero, seed=5).run(requests).results
    assert [(r.ttft_s, r.chunk_gaps_s) for r in a] == [(r.ttft_s, r.chunk_gaps_s) for r in b]
    stalled = prof.model_copy(update={"host_stall_rate_per_s": 5.0, "host_stall_median_s": 0.02})
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


def _pd_layout(*, pull_between_steps: bool) -> SimLayout:
    """1P1D whose prefill engine takes one prompt at a time."""
    specs = (
        EngineSpec("p0", "prefill", limits(max_num_seqs=1), "p0"),
        EngineSpec("d0", "decode", limits(), "d0"),
    )
    return SimLayout(
        name="t",
        aggregated=False,
        engines=specs,
        policy=PolicyConfig(block_size_tokens=BLOCK, lanes=False, spill_max_decode_prefill_s=0),
        stream_batch_interval_s=0.0,
        kv_pull_between_prefill_steps=pull_between_steps,
    )


def test_on_cpu_a_kv_pull_waits_for_the_prefill_engines_step() -> None:
    """Two long prompts on one prefill engine: the first one's KV pull starts two hops after
    its prefill, while the engine already computes the second; without NIXL's progress
    thread it waits for that step to end."""
    pair = [request(0, 4000, out=2), request(1, 4000, out=2, at=0.0005)]
    free = Simulation(_pd_layout(pull_between_steps=False), PROFILE).run(pair).results[0]
    waits = Simulation(_pd_layout(pull_between_steps=True), PROFILE).run(pair).results[0]
    assert free.ttft_s is not None and waits.ttft_s is not None
    # It waits for the rest of the second prompt's step (minus the two hops that overlap it).
    assert waits.ttft_s - free.ttft_s == pytest.approx(prefill_s(4000) - 2 * PROFILE.hop_s)


def test_serving_times_grow_with_busy_host_cores() -> None:
    prof = PROFILE.model_copy(update={"host_cores": 2, "host_contention": 3.0})
    assert prof.serving_s(0.004, 0) == pytest.approx(0.004)
    assert prof.serving_s(0.004, 1) == pytest.approx(0.004 * 2.5)
    assert prof.serving_s(0.004, 5) == pytest.approx(0.004 * 4)  # capped at every core
    assert PROFILE.serving_s(0.004, 2) == 0.004  # no host_cores: the serving layer's own CPUs
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
    prof = PROFILE.model_copy(update={"client_s": 0.01, "client_jitter_sigma": sigma})
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
    prof = PROFILE.model_copy(update={"decode_jitter_sigma": 1.5})
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
        prof = PROFILE.model_copy(update=sigmas)
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


def test_stages_are_the_router_s_timeline_and_add_up_to_its_ttft() -> None:
    """A remote prefill alone: each stage is its modelled piece, and they add up to the TTFT
    the router sees (the client adds client_time_s)."""
    lay = layout(num_prefill=1, policy=PolicyConfig(block_size_tokens=BLOCK))
    prof = PROFILE.model_copy(update={"client_s": 0.005})
    [r] = Simulation(lay, prof).run([request(0, 2000, out=2)]).results
    assert r.stages == pytest.approx(
        {
            "router_queue": PROFILE.router_s,
            "prefill_queue": 0.0,
            "prefill": prefill_s(2000),
            "prefill_hops": 2 * PROFILE.hop_s,  # there, and back to the router
            "kv_transfer": PROFILE.kv_transfer_s(2000),
            "decode_first_token": COST.est_decode_step_s(1, 2000),
            "decode_hops": 2 * PROFILE.hop_s,  # router -> decode, first token -> router
            "decode": COST.est_decode_step_s(1, 2000),
        }
    )
    router_ttft = sum(v for k, v in r.stages.items() if k != "decode")
    assert r.ttft_s == pytest.approx(router_ttft + 0.005)


def test_the_wait_for_the_step_in_progress_counts_as_hops_as_vllm_reports_it() -> None:
    """vLLM adds a request to its scheduler between steps: a prompt that arrives while a step
    runs shows no queue time; the router's window counts that wait in the hops. Waiting
    across a step boundary (no room in the step) is queue time."""
    first, second = request(0, 4000, out=1), request(1, 64, out=1, at=0.1)
    out = Simulation(layout(), PROFILE).run([first, second]).results
    busy_until = PROFILE.router_s + PROFILE.hop_s + prefill_s(4000)
    arrived = 0.1 + PROFILE.router_s + PROFILE.hop_s
    assert out[1].stages["kv_transfer"] == pytest.approx(0.0)  # a local prefill's queue
    assert out[1].stages["decode_hops"] == pytest.approx(2 * PROFILE.hop_s + busy_until - arrived)
    # One sequence slot: the second waits for the first's 4 decode steps after the boundary.
    first = request(0, 4000, out=5)
    out = Simulation(layout(max_num_seqs=1), PROFILE).run([first, second]).results
    assert out[1].stages["kv_transfer"] == pytest.approx(4 * COST.est_decode_step_s(1, 0))
    assert out[1].stages["decode_hops"] == pytest.approx(2 * PROFILE.hop_s + busy_until - arrived)


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
    taking = steady.model_copy(update={"local_intake_per_token_s": 1e-4})
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
