"""The simulator without a cpu_host block against closed-form cases: one request alone, a
remote prefill's hops and KV transfer, an M/G/1 queue (Pollaczek-Khinchine), a closed loop, a
decode batch, a shared device, a cached prefix, the router's timeline stages. Without the
block every time is exact: the cases hold to float precision (the M/G/1 mean to sampling)."""

from __future__ import annotations

import random
import statistics

import pytest

from pdserve.router.policy.config import PolicyConfig
from pdserve.sim.layout import EngineSpec, SimLayout
from pdserve.sim.simulator import Simulation
from pdserve.sim.stream import coalesce_times
from pdserve.sim.workload import SimRequest
from tests.unit.sim.helpers import BLOCK, COST, PROFILE, layout, limits, prefill_s, request


def test_one_request_alone_takes_exactly_its_modelled_path() -> None:
    [r] = Simulation(layout(), PROFILE).run([request(0, 1000, out=3)]).results
    ttft = PROFILE.router_s + 2 * PROFILE.hop_s + prefill_s(1000)
    assert r.ttft_s == pytest.approx(ttft)
    step = COST.est_decode_step_s(1, 0)
    assert r.chunk_gaps_s == pytest.approx((step, step))
    assert r.e2e_s == pytest.approx(ttft + 2 * step)


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
    lengths = [rng.randint(200, 2000) for _ in range(12_000)]
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


def test_stages_are_the_router_s_timeline_and_add_up_to_its_ttft() -> None:
    """A remote prefill alone: each stage is its modelled piece, and they add up to the TTFT
    (without a cpu_host block the client adds nothing)."""
    lay = layout(num_prefill=1, policy=PolicyConfig(block_size_tokens=BLOCK))
    [r] = Simulation(lay, PROFILE).run([request(0, 2000, out=2)]).results
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
    assert r.ttft_s == pytest.approx(router_ttft)


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
