"""The measured pace (router/policy/pace.py): measured ÷ predicted prefill seconds per pool, and
the local-vs-remote comparison it scales in RoutingPolicy._pdserve (spill-over, the ITL guard's
TTFT saved), fed by the placer when a prefill ends."""

from __future__ import annotations

import pytest

from pdserve.router.placement import Placer
from pdserve.router.policy import OutstandingWork, PolicyConfig, PrefixIndex
from pdserve.router.policy.pace import CostScale, PrefillPace
from pdserve.router.policy.pipeline import RoutingPolicy
from pdserve.router.policy.types import Decision
from pdserve.router.replica_view import ReplicaView
from tests.unit.policy.factories import ROUND_COST, req, snap
from tests.unit.router.fakes import BLOCK_TOKENS, FixedSource, StepClock

# Round numbers: a prompt token 0.1 ms, 10 ms per prompt, 20 us of transfer per token.
COST = ROUND_COST
PROMPT = 1000  # 0.11 s to prefill anywhere


def _policy(pace_weight: float = 1.0, **kw: object) -> RoutingPolicy:
    """Every prompt goes remote by the local rules; spill-over when 0.25 s sooner on decode."""
    cfg = {
        "cost_model": COST,
        "local_prefill_max_cold_tokens": 0,
        "spill_min_gain_s": 0.25,
        "spill_max_decode_prefill_s": 5.0,
        "itl_slo_s": None,
        "pace_weight": pace_weight,
        **kw,
    }
    return RoutingPolicy(PolicyConfig.model_validate(cfg))


def _decide(policy: RoutingPolicy, decode_running: int = 0, pace: bool | None = None) -> Decision:
    """p0 has 2,000 tokens queued (0.21 s predicted), d0 nothing: the spill gains about 0.24 s
    on the cost model alone, under the 0.25 s margin."""
    return policy.decide(
        req(PROMPT),
        [snap("p0", queued=2000, queued_prefills=1)],
        [snap("d0", "decode", running=decode_running)],
        PrefixIndex(),
        OutstandingWork(),
        0.0,
        pace=pace,
    )


def _measured(policy: RoutingPolicy, local: bool, factor: float, times: int = 1) -> None:
    """`times` prefills that took `factor` x their prediction."""
    decision = Decision(
        prefill_replica_id=None if local else "p0",
        decode_replica_id="d0",
        engine_priority=0,
        est_prefill_s=0.1,
        num_cached_tokens=0,
        num_cached_tokens_decode=0,
        reason="test",
    )
    for _ in range(times):
        policy.observe_prefill(decision, 0.1 * factor)


def test_cost_scale_is_a_moving_mean_of_log_ratios_clamped() -> None:
    scale = CostScale(weight=0.5)
    assert scale.ratio == 1.0 and scale.observations == 0
    scale.observe(1.0, 4.0)
    assert scale.ratio == pytest.approx(2.0)  # exp(0.5 x ln 4)
    scale.observe(0.0, 1.0)  # no prediction: ignored
    scale.observe(1.0, -1.0)
    assert scale.observations == 1
    for _ in range(60):
        scale.observe(1.0, 1e6)
    assert scale.ratio == pytest.approx(20.0)  # clamped
    with pytest.raises(ValueError, match="weight"):
        CostScale(weight=0.0)


def test_prefill_pace_keeps_the_pools_apart_and_weight_zero_is_off() -> None:
    pace = PrefillPace(1.0)
    pace.observe("prefill", 0.1, 0.3)
    assert pace.ratio("prefill") == pytest.approx(3.0) and pace.ratio("decode") == 1.0
    off = PrefillPace(0.0)
    off.observe("prefill", 0.1, 0.3)
    assert not off.enabled and off.ratio("prefill") == 1.0
    with pytest.raises(ValueError, match="weight"):
        PrefillPace(1.5)


def test_a_prefill_pool_slower_than_predicted_makes_the_prompt_spill() -> None:
    policy = _policy()
    raw = _decide(policy)
    assert raw.prefill_replica_id == "p0", raw.reason
    raw_remote = raw.predicted_ttft_s["p0"]
    transfer = COST.est_remote_extra_s(PROMPT)
    assert raw_remote - raw.predicted_ttft_s["local:d0"] < 0.25
    assert "measured pace prefill x1.00, decode x1.00" in raw.reason

    _measured(policy, local=False, factor=3.0)  # weight 1: the pace is the last ratio
    assert policy.pace.ratio("prefill") == pytest.approx(3.0)
    paced = _decide(policy)
    assert paced.prefill_is_local and paced.reason.startswith("spill"), paced.reason
    assert "measured pace prefill x3.00, decode x1.00" in paced.reason
    # The remote option's compute (queue + prompt) is scaled, its transfer is not.
    assert paced.predicted_ttft_s["p0"] == pytest.approx(3 * (raw_remote - transfer) + transfer)
    assert paced.predicted_ttft_s["local:d0"] == pytest.approx(raw.predicted_ttft_s["local:d0"])

    # A request can compare on the cost model alone (x-pdserve-pace: off).
    off = _decide(policy, pace=False)
    assert off.prefill_replica_id == "p0" and "measured pace" not in off.reason
    assert off.predicted_ttft_s == raw.predicted_ttft_s


def test_a_decode_engine_slower_than_predicted_keeps_the_prompt_remote() -> None:
    policy = _policy()
    _measured(policy, local=False, factor=3.0)
    _measured(policy, local=True, factor=10.0)  # local prefills took 10x their prediction
    assert policy.pace.ratio("decode") == pytest.approx(10.0)
    d = _decide(policy)
    assert d.prefill_replica_id == "p0", d.reason
    assert d.predicted_ttft_s["local:d0"] == pytest.approx(10 * COST.est_prefill_s(PROMPT, 0))


def test_the_itl_guard_weighs_the_paced_ttft_saved() -> None:
    """stall_weight 1: 24 streams stall 0.1 s each = 2.4 stream-seconds; the TTFT a local
    prefill saves covers that only once the prefill pool is seen at its measured pace."""
    policy = _policy(itl_slo_s=0.2, stall_weight=1.0, local_prefill_max_cold_tokens=4096)
    before = _decide(policy, decode_running=24)
    assert not before.prefill_is_local and before.itl == "not_worth", before.reason
    _measured(policy, local=False, factor=20.0)
    after = _decide(policy, decode_running=24)
    assert after.prefill_is_local and after.itl == "worth", after.reason
    saved = after.predicted_ttft_s["p0"] - after.predicted_ttft_s["local:d0"]
    assert after.itl_cost is not None and saved >= after.itl_cost.stream_stall_s


def test_pace_weight_zero_keeps_the_cost_models_predictions() -> None:
    policy = _policy(pace_weight=0.0)
    before = _decide(policy)
    _measured(policy, local=False, factor=3.0, times=5)
    after = _decide(policy)
    assert after.prefill_replica_id == "p0" and "measured pace" not in after.reason
    assert after.predicted_ttft_s == before.predicted_ttft_s


def test_only_pdserve_decisions_teach_the_pace() -> None:
    policy = _policy()
    baseline = Decision(
        prefill_replica_id="p0",
        decode_replica_id="d0",
        engine_priority=0,
        est_prefill_s=0.1,
        num_cached_tokens=0,
        num_cached_tokens_decode=0,
        reason="round_robin",
        policy="round_robin",
    )
    policy.observe_prefill(baseline, 1.0)
    assert policy.pace.ratio("prefill") == 1.0


def test_the_placer_teaches_the_pace_when_a_prefill_ends() -> None:
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    view.attach("prefill", FixedSource(["p0"]))
    view.attach("decode", FixedSource(["d0"]))
    config = PolicyConfig(block_size_tokens=BLOCK_TOKENS, pace_weight=0.5)
    placer = Placer(config, view, StepClock(1000.0), policy="pdserve")
    d = placer.place("r1", list(range(600)), 0, None)
    assert d is not None and d.prefill_replica_id == "p0"
    placer.prefill_done(d, "r1", measured_s=4 * d.est_prefill_s)
    d2 = placer.place("r2", list(range(600, 1200)), 0, None)
    assert d2 is not None and "measured pace prefill x2.00" in d2.reason
    placer.prefill_done(d2, "r2")  # nothing measured (a failed prefill): the pace stays
    d3 = placer.place("r3", list(range(1200, 1800)), 0, None)
    assert d3 is not None and "measured pace prefill x2.00" in d3.reason
