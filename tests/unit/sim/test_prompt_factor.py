"""prefill_step_factor in the simulator: it slows the prompt tokens' per-token and attention
terms of a step, not the step's fixed costs or the sequences it decodes (closed-form cases on
the helpers' one-engine layout)."""

from __future__ import annotations

import pytest

from pdserve.sim.simulator import Simulation
from tests.unit.sim.helpers import COST, PROFILE, layout, prefill_s, request


def test_prompt_steps_take_the_profile_s_prefill_factor_on_their_tokens_only() -> None:
    """prefill_step_factor scales the prompt tokens' per-token term of a step (before the
    extra is added), not the prompt's fixed cost; decode steps keep the cost model's time."""
    extra = 0.002
    loaded = PROFILE.with_host_terms(prefill_step_factor=1.5, engine_step_extra_s=extra)
    [r] = Simulation(layout(), loaded).run([request(0, 1000, out=3)]).results
    hops_s = PROFILE.router_s + 2 * PROFILE.hop_s
    tokens_s = COST.per_token_s * 1000
    assert r.ttft_s == pytest.approx(hops_s + prefill_s(1000) + 0.5 * tokens_s + extra)
    step = COST.est_decode_step_s(1, 0) + extra
    assert r.chunk_gaps_s == pytest.approx((step, step))


def test_a_short_prompt_beside_a_decode_batch_is_slowed_only_by_its_tokens() -> None:
    """A 32-token prompt that joins a running stream's decode steps: its mixed step takes the
    cost model's time plus (factor - 1) x the prompt's 32 tokens' term, not factor x the
    whole step (the prompt's fixed cost and the decoding stream's part stay idle). Its first
    token can also wait up to one decode step longer or shorter (the slowed first prompt
    shifts the decode steps it lands between). Measured on run T, a short prompt's first
    step took 5.1 ms under load against an idle estimate of about 5.6."""
    factor = 3.0
    loaded = PROFILE.with_host_terms(prefill_step_factor=factor)
    reqs = [request(0, 64, out=400), request(1, 32, out=1, at=0.2)]
    idle = Simulation(layout(), PROFILE).run(reqs).results[1]
    slow = Simulation(layout(), loaded).run(reqs).results[1]
    tokens_s = (factor - 1) * COST.per_token_s * 32
    decode_step_s = COST.est_decode_step_s(1, 0)
    whole_step_s = (factor - 1) * (COST.fixed_overhead_s + COST.per_token_s * 32 + 0.001)
    assert abs(slow.ttft_s - idle.ttft_s - tokens_s) <= decode_step_s
    assert slow.ttft_s - idle.ttft_s < whole_step_s - decode_step_s
