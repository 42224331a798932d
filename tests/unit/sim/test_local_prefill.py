"""SimProfile.local_prefill_fixed_s in the simulator: a prompt an engine prefills for its own
decoding (every prompt of an aggregated engine, a decode engine's local prefill) pays that
fixed cost; a prefill-pool engine's prompts keep the cost model's fixed_overhead_s
(closed-form cases on the helpers' layouts); and how `pdserve profile`'s samples fit it."""

from __future__ import annotations

import pytest

from pdserve.profiling.samples import LocalPrefillSample, ServingSample
from pdserve.router.policy.config import PolicyConfig
from pdserve.sim.fit import fit_sim_profile, local_hop_s, local_prefill_fixed_s
from pdserve.sim.simulator import Simulation
from tests.unit.sim.helpers import BLOCK, COST, PROFILE, layout, prefill_s, request

LOCAL_FIXED_S = 0.007
"""Between COST.decode_base_s (0.005, every step's floor) and fixed_overhead_s (0.01)."""
LOCAL = PROFILE.model_copy(update={"local_prefill_fixed_s": LOCAL_FIXED_S})


def test_an_aggregated_engine_s_prompt_pays_the_local_fixed_cost() -> None:
    [r] = Simulation(layout(), LOCAL).run([request(0, 1000, out=2)]).results
    own_s = prefill_s(1000) - COST.fixed_overhead_s + LOCAL_FIXED_S
    assert r.ttft_s == pytest.approx(PROFILE.router_s + 2 * PROFILE.hop_s + own_s)
    [same] = Simulation(layout(), PROFILE).run([request(0, 1000, out=2)]).results
    assert same.ttft_s - r.ttft_s == pytest.approx(COST.fixed_overhead_s - LOCAL_FIXED_S)


def test_a_decode_engine_s_local_prefill_pays_it_and_a_remote_prefill_does_not() -> None:
    policy = PolicyConfig(block_size_tokens=BLOCK, local_prefill_max_cold_tokens=128)
    lay = layout(num_prefill=1, policy=policy)
    short, long = request(0, 64, out=1), request(1, 2000, out=1, at=1.0)
    with_local = Simulation(lay, LOCAL).run([short, long]).results
    without = Simulation(lay, PROFILE).run([short, long]).results
    assert with_local[0].decision is not None and with_local[0].decision.prefill_replica_id is None
    assert without[0].ttft_s - with_local[0].ttft_s == pytest.approx(
        COST.fixed_overhead_s - LOCAL_FIXED_S
    )
    assert with_local[1].decision is not None
    assert with_local[1].decision.prefill_replica_id == "p0"
    assert with_local[1].ttft_s == pytest.approx(without[1].ttft_s)


def test_without_a_measurement_every_prompt_pays_the_cost_model_s_fixed_cost() -> None:
    assert PROFILE.local_prefill_fixed_s is None
    assert PROFILE.own_prompt_fixed_s() == COST.fixed_overhead_s
    assert LOCAL.own_prompt_fixed_s() == LOCAL_FIXED_S


# ---- fitting it from the profile's local prefills ---------------------------------------

FITTED = COST.model_copy(update={"per_token_sq_s": 1e-8, "decode_per_context_token_s": 1e-6})


def _sample(tokens: int, fixed_s: float, batch: int = 0, ctx: int = 0) -> LocalPrefillSample:
    """A first step that took `fixed_s` plus FITTED's token terms and its streams' terms."""
    step_s = FITTED.est_prefill_s(tokens, 0) - FITTED.fixed_overhead_s + fixed_s
    if batch:
        step_s += FITTED.est_decode_step_s(batch, ctx) - FITTED.decode_base_s
    return LocalPrefillSample(tokens, 0, step_s, batch_size=batch, context_tokens=ctx)


def test_the_fixed_cost_is_the_step_less_the_prompt_s_and_the_streams_terms() -> None:
    """Beside a batch the streams' per-sequence and context terms come off too; those samples
    win over the ones taken alone (which here carry 3 ms of an idle engine's wake-up)."""
    beside = [_sample(64, 0.006, batch=b, ctx=b * 1100) for b in (1, 4, 8, 16)]
    alone = [_sample(n, 0.009) for n in (32, 64, 96)]
    assert local_prefill_fixed_s(FITTED, beside + alone) == pytest.approx(0.006)
    assert local_prefill_fixed_s(FITTED, alone) == pytest.approx(0.009)
    assert local_prefill_fixed_s(FITTED, []) is None


def test_the_fit_is_a_median_and_never_negative() -> None:
    noisy = [_sample(64, t, batch=4, ctx=4000) for t in (0.004, 0.005, 0.030)]
    assert local_prefill_fixed_s(FITTED, noisy) == pytest.approx(0.005)
    assert local_prefill_fixed_s(FITTED, [_sample(64, -0.002, batch=1, ctx=100)]) == 0.0


def test_fit_sim_profile_takes_the_local_samples() -> None:
    serving = [
        ServingSample(n, router_s=0.004, prefill_hops_s=0.006, kv_wait_s=0.01,
                      decode_hops_s=0.010, decode_first_token_s=0.02)
        for n in (256, 3000)
    ]  # fmt: skip
    assert fit_sim_profile(FITTED, serving, source="t").local_prefill_fixed_s is None
    prof = fit_sim_profile(FITTED, serving, source="t", local_prefill=[_sample(64, 0.007)])
    assert prof.local_prefill_fixed_s == pytest.approx(0.007)


def test_a_local_prefill_s_hops_up_to_its_first_token_are_the_local_hop() -> None:
    """local_hop_s replaces hop_s for the hops to the decode replica and the first chunk back
    of a request its decode engine prefills; later chunks and the remote path keep hop_s."""
    hop = PROFILE.model_copy(update={"local_hop_s": 0.0004})
    [r] = Simulation(layout(), hop).run([request(0, 1000, out=3)]).results
    assert r.ttft_s == pytest.approx(PROFILE.router_s + 2 * 0.0004 + prefill_s(1000))
    step = COST.est_decode_step_s(1, 0)
    assert r.chunk_gaps_s == pytest.approx((step + PROFILE.hop_s - 0.0004, step))
    remote = layout(num_prefill=1, policy=PolicyConfig(block_size_tokens=BLOCK))
    [a] = Simulation(remote, hop).run([request(0, 2000, out=2)]).results
    [b] = Simulation(remote, PROFILE).run([request(0, 2000, out=2)]).results
    assert a.decision is not None and a.decision.prefill_replica_id == "p0"
    assert a.ttft_s == pytest.approx(b.ttft_s)


def test_the_local_hop_is_half_the_median_round_trip_of_the_lone_local_prefills() -> None:
    def sample(hops_s: float | None, batch: int = 0) -> LocalPrefillSample:
        return LocalPrefillSample(64, 0, 0.005, batch_size=batch, decode_hops_s=hops_s)

    alone = [sample(0.004), sample(0.006), sample(0.030), sample(None)]
    assert local_hop_s([*alone, sample(0.5, batch=8)]) == pytest.approx(0.003)
    assert local_hop_s([sample(0.004, batch=1), sample(None)]) is None
