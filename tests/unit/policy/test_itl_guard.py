"""The ITL guard: what a local prefill costs a decode replica's streams, and the decision it
changes (router/policy/itl_guard.py, used by RoutingPolicy._pdserve and the decode engine's
scheduler)."""

from __future__ import annotations

import random

import pytest

from pdserve.router.policy import OutstandingWork, PolicyConfig, PrefixIndex
from pdserve.router.policy.itl_guard import ItlGuard, chunk_s, chunk_tokens
from pdserve.router.policy.pipeline import RoutingPolicy
from tests.unit.policy.factories import ROUND_COST, req, snap

# Round numbers: a decode step of b streams takes 5 ms + 1 ms x b; a prompt token 0.1 ms.
COST = ROUND_COST


def _policy(**kw: object) -> RoutingPolicy:
    cfg = {"cost_model": COST, "local_prefill_max_cold_tokens": 256, **kw}
    return RoutingPolicy(PolicyConfig.model_validate(cfg))


def _decide(policy: RoutingPolicy, tokens: int, decode_running: int, prefill_queued: int = 0):
    return policy.decide(
        req(tokens),
        [snap("p0", queued=prefill_queued, queued_prefills=1 if prefill_queued else 0)],
        [snap("d0", "decode", running=decode_running)],
        PrefixIndex(),
        OutstandingWork(),
        0.0,
    )


def test_chunk_is_the_largest_that_keeps_the_step_within_the_budget() -> None:
    # 50 ms budget, 10 streams: the step alone is 15 ms, 35 ms left = 350 tokens.
    assert chunk_tokens(COST, 0.05, 10, 0, 4096) == 350
    assert chunk_tokens(COST, 0.05, 10, 0, 100) == 100  # never more than asked
    assert chunk_tokens(COST, 0.015, 10, 0, 4096) == 0  # the step alone fills the budget
    quad = COST.model_copy(update={"per_token_sq_s": 1e-7})
    t = chunk_tokens(quad, 0.05, 10, 2000, 4096)
    assert quad.est_decode_step_s(10, 0) + chunk_s(quad, t, 2000) <= 0.05
    assert quad.est_decode_step_s(10, 0) + chunk_s(quad, t + 1, 2000) > 0.05


def test_a_stream_heavy_replica_refuses_the_local_prefill_an_idle_one_accepts() -> None:
    policy = _policy(itl_slo_s=0.05)
    idle = _decide(policy, 200, decode_running=0)
    assert idle.prefill_is_local, idle.reason
    busy = _decide(policy, 200, decode_running=44)  # 49 ms step: no room for 16 tokens
    assert not busy.prefill_is_local, busy.reason
    assert busy.itl == "no_headroom"
    assert "remote, not local (no_headroom)" in busy.reason
    assert busy.itl_cost is not None and busy.itl_cost.streams == 44


def test_a_local_prefill_is_refused_when_the_ttft_it_saves_is_worth_less_than_the_stall() -> None:
    # 200 tokens stall each stream 20 ms; remote costs the prefill + 4 ms of transfer more.
    policy = _policy(itl_slo_s=0.2, stall_weight=1.0)
    few = _decide(policy, 200, decode_running=1, prefill_queued=2000)  # prefill queue 0.2 s
    assert few.prefill_is_local and few.itl == "worth", few.reason
    many = _decide(policy, 200, decode_running=30, prefill_queued=2000)  # 30 x 20 ms = 0.6 s
    assert not many.prefill_is_local and many.itl == "not_worth", many.reason
    # stall_weight 0 keeps only the SLO bound.
    free = _decide(_policy(itl_slo_s=0.2, stall_weight=0.0), 200, 30, prefill_queued=2000)
    assert free.prefill_is_local


def test_the_guard_off_keeps_the_old_rules() -> None:
    d = _decide(_policy(itl_slo_s=None), 200, decode_running=40)
    assert d.prefill_is_local and d.itl is None and d.itl_cost is None


def test_spill_over_is_held_to_the_budget() -> None:
    # The prefill pool is 2 s behind: spill-over would win TTFT by far.
    backed_up = 20_000
    light = _decide(_policy(itl_slo_s=0.1, stall_weight=0.0), 1500, 2, backed_up)
    assert light.prefill_is_local and light.reason.startswith("spill:"), light.reason
    c = light.itl_cost
    assert c is not None and c.step_s <= 0.1 and c.chunk_tokens * c.steps >= 1500
    heavy = _decide(_policy(itl_slo_s=0.1, stall_weight=0.0), 1500, 95, backed_up)
    assert not heavy.prefill_is_local and heavy.itl == "no_headroom", heavy.reason
    assert "not spilled" in heavy.reason


def test_local_ttft_counts_the_budget_chunks() -> None:
    guard = ItlGuard(COST, 0.05)
    c = guard.cost(10, 1000, 0)  # 350-token chunks, 3 steps of 50 ms
    assert (c.chunk_tokens, c.steps) == (350, 3)
    assert c.step_s == pytest.approx(0.05)
    assert guard.local_ttft_s(c, 0.0, COST.est_prefill_s(1000, 0)) == pytest.approx(0.15)
    assert c.stall_s == pytest.approx(0.1)  # the prompt's compute, without the fixed cost


@pytest.mark.parametrize("seed", range(5))
def test_every_local_prefill_of_a_recorded_sequence_keeps_the_streams_within_the_slo(
    seed: int,
) -> None:
    """A random decision sequence on two decode replicas whose streams come and go: every
    local prefill the policy chose while streams decoded is predicted to keep each step within
    the SLO, its chunks cover the prompt, and the TTFT it saved covered the stall."""
    rng = random.Random(seed)
    slo = 0.04
    policy = _policy(itl_slo_s=slo, stall_weight=1.0, local_prefill_max_cold_tokens=512)
    running = {"d0": 0, "d1": 0}
    locals_with_streams = 0
    for i in range(400):
        for rid in running:
            running[rid] = max(0, running[rid] + rng.randint(-3, 3))
        tokens = rng.choice([30, 100, 300, 500, 1500, 3000])
        prefill = [snap("p0", queued=rng.randint(0, 30_000), queued_prefills=1)]
        decode = [snap(rid, "decode", running=n) for rid, n in running.items()]
        d = policy.decide(
            req(tokens, request_id=f"r{i}"), prefill, decode, PrefixIndex(), OutstandingWork(), 0.0
        )
        streams = running[d.decode_replica_id]
        if not d.prefill_is_local or streams == 0:
            continue
        locals_with_streams += 1
        c = d.itl_cost
        assert c is not None and d.itl == "worth", d.reason
        assert c.step_s <= slo + 1e-12, d.reason
        assert c.chunk_tokens * c.steps >= tokens
        saved = d.predicted_ttft_s["p0"] - d.predicted_ttft_s[f"local:{d.decode_replica_id}"]
        assert saved >= c.stream_stall_s - 1e-12
    assert locals_with_streams > 10  # the sequence did exercise the guard


def test_a_request_can_skip_the_guard() -> None:
    """x-pdserve-itl-guard: off (pdserve profile measures local prefills beside streams)."""
    policy = _policy(itl_slo_s=0.05)
    args = (req(200), [snap("p0")], [snap("d0", "decode", running=44)], PrefixIndex())
    assert not policy.decide(*args, OutstandingWork(), 0.0).prefill_is_local
    off = policy.decide(*args, OutstandingWork(), 0.0, itl_guard=False)
    assert off.prefill_is_local and off.itl is None


def test_a_plain_remote_decision_carries_no_verdict() -> None:
    """Only decisions where a local option was weighed carry the guard's verdict (and are
    counted in pdserve_itl_guard_decisions_total)."""
    d = _decide(_policy(itl_slo_s=0.05), 3000, decode_running=5)  # over the cold threshold
    assert not d.prefill_is_local and d.reason.startswith("remote: prefill p0")
    assert d.itl is None and d.itl_cost is None
