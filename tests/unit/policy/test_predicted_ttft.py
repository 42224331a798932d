"""Placement on predicted time to first token: the engines' own queues, cache affinity through
the uncached-token term, spill-over to decode when the prefill pool is backed up, and the
predictions in the decision (what `x-pdserve-decision` shows)."""

from __future__ import annotations

import pytest

from pdserve.router.policy import (
    CostModel,
    OutstandingWork,
    PolicyConfig,
    PrefixIndex,
    RoutingPolicy,
)
from tests.unit.policy.factories import BLOCK, hashes, req, snap

DECODE = [snap("d0", "decode")]
COST = CostModel()


def _backlog(seconds: float) -> int:
    """Queued prompt tokens the cost model prices at `seconds`."""
    return round(seconds / COST.per_token_s)


def test_the_engines_own_queue_steers_placement_without_this_routers_work() -> None:
    # Another router filled p0: this one has sent nothing anywhere, the engine says so.
    prefill = [snap("p0", queued=_backlog(3.0), queued_prefills=4), snap("p1")]
    no_spill = PolicyConfig(spill_max_decode_prefill_s=0)
    d = RoutingPolicy(no_spill).decide(req(2048), prefill, DECODE, PrefixIndex(),
                                       OutstandingWork(), 0.0)  # fmt: skip
    assert d.prefill_replica_id == "p1"
    wait_p0 = COST.est_backlog_s(_backlog(3.0), 4)
    tokens = _backlog(3.0)
    attention = COST.per_token_sq_s * tokens * (tokens / 4) / 2  # as 4 equal prompts
    assert wait_p0 == pytest.approx(3.0 + 4 * COST.fixed_overhead_s + attention)
    assert d.predicted_ttft_s["p0"] - d.predicted_ttft_s["p1"] == pytest.approx(wait_p0)


@pytest.mark.parametrize(("queued_s", "winner"), [(0.1, "p1"), (3.0, "p0")])
def test_a_cached_prefix_wins_unless_its_replica_is_the_bottleneck(
    queued_s: float, winner: str
) -> None:
    conv = hashes(30)
    index = PrefixIndex()
    index.add_blocks("p1", conv[:28])  # p1 holds 28 of 30 blocks: far less to compute there
    prefill = [snap("p0"), snap("p1", queued=_backlog(queued_s), queued_prefills=1)]
    no_spill = PolicyConfig(spill_max_decode_prefill_s=0, lanes=False)
    d = RoutingPolicy(no_spill).decide(req(30 * BLOCK, conv), prefill, DECODE, index,
                                       OutstandingWork(), 0.0)  # fmt: skip
    assert d.prefill_replica_id == winner
    assert min(d.predicted_ttft_s, key=lambda k: d.predicted_ttft_s[k]) in (winner, "local:d0")


def test_a_long_prompt_spills_to_decode_when_the_prefill_pool_is_backed_up() -> None:
    prefill = [snap("p0", queued=_backlog(2.0), queued_prefills=2),
               snap("p1", queued=_backlog(1.5), queued_prefills=2)]  # fmt: skip
    r = req(1500)
    d = RoutingPolicy().decide(r, prefill, DECODE, PrefixIndex(), OutstandingWork(), 0.0)
    assert d.prefill_is_local and d.decode_replica_id == "d0"
    assert d.reason.startswith("spill: local on decode d0")
    local = d.predicted_ttft_s["local:d0"]
    assert local == pytest.approx(COST.est_prefill_s(1500, 0))  # idle decode: no wait, no KV move
    assert d.predicted_ttft_s["p1"] - local >= PolicyConfig().spill_min_gain_s
    assert d.predicted_wait_s == 0.0


@pytest.mark.parametrize(
    ("decode_queued_s", "prefill_queued_s", "why"),
    [
        (0.5, 2.0, "decode's own prefill queue would pass the ITL bound"),
        (0.0, 0.05, "the prefill pool keeps up: the gain is under the margin"),
    ],
)
def test_no_spill_when_decode_is_busy_prefilling_or_the_gain_is_small(
    decode_queued_s: float, prefill_queued_s: float, why: str
) -> None:
    decode = [snap("d0", "decode", queued=_backlog(decode_queued_s), queued_prefills=1)]
    prefill = [snap("p0", queued=_backlog(prefill_queued_s), queued_prefills=1)]
    d = RoutingPolicy().decide(req(1500), prefill, decode, PrefixIndex(), OutstandingWork(), 0.0)
    assert d.prefill_replica_id == "p0", why
    assert d.reason.startswith("remote: prefill p0")
    assert d.predicted_wait_s == pytest.approx(COST.est_backlog_s(_backlog(prefill_queued_s), 1))


def test_spill_over_off() -> None:
    prefill = [snap("p0", queued=_backlog(5.0), queued_prefills=5)]
    off = RoutingPolicy(PolicyConfig(spill_max_decode_prefill_s=0))
    d = off.decide(req(1500), prefill, DECODE, PrefixIndex(), OutstandingWork(), 0.0)
    assert d.prefill_replica_id == "p0"


def test_the_remote_option_pays_the_kv_transfer_the_local_one_does_not() -> None:
    d = RoutingPolicy(PolicyConfig(spill_max_decode_prefill_s=0)).decide(
        req(2000), [snap("p0")], DECODE, PrefixIndex(), OutstandingWork(), 0.0
    )
    transfer = COST.est_remote_extra_s(2000)
    assert transfer > COST.est_transfer_s(2000) > 0  # the hops and KV setup, then the move
    assert d.predicted_ttft_s["p0"] == pytest.approx(COST.est_prefill_s(2000, 0) + transfer)
    assert d.predicted_ttft_s["local:d0"] == pytest.approx(COST.est_prefill_s(2000, 0))


def test_baselines_report_the_wait_admission_control_checks() -> None:
    prefill = [snap("p0", queued=_backlog(1.0), queued_prefills=2)]
    d = RoutingPolicy(policy="round_robin").decide(
        req(1000), prefill, DECODE, PrefixIndex(), OutstandingWork(), 0.0
    )
    assert d.predicted_wait_s == pytest.approx(COST.est_backlog_s(_backlog(1.0), 2))
    assert set(d.predicted_ttft_s) == {"p0"}
