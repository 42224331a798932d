"""RoutingPolicy.decide end to end on plain data: the scenarios a user would notice."""

from __future__ import annotations

from typing import Any, cast

import pytest

from pdserve.names import PolicyName
from pdserve.router.policy import (
    NoReplicaError,
    OutstandingWork,
    PolicyConfig,
    PrefixIndex,
    ReplicaSnapshot,
    RoutingPolicy,
)
from tests.unit.policy.factories import BLOCK, hashes, req, snap

PREFILL = [snap("p0"), snap("p1")]
DECODE = [snap("d0", "decode"), snap("d1", "decode")]


def test_agent_step_goes_where_its_prefix_is_cached_round_robin_alternates() -> None:
    conv = hashes(45)
    index = PrefixIndex()
    index.add_blocks("p1", conv[:40])
    r = req(45 * BLOCK + 20, conv)
    pd = RoutingPolicy()
    rr = RoutingPolicy(policy="round_robin")
    pd_choices = [pd.decide(r, PREFILL, DECODE, index, OutstandingWork(), 0.0) for _ in range(4)]
    rr_choices = [rr.decide(r, PREFILL, DECODE, index, OutstandingWork(), 0.0) for _ in range(4)]
    assert [d.prefill_replica_id for d in pd_choices] == ["p1"] * 4
    assert [d.prefill_replica_id for d in rr_choices] == ["p0", "p1", "p0", "p1"]
    assert [d.decode_replica_id for d in rr_choices] == ["d0", "d1", "d0", "d1"]
    d = pd_choices[0]
    assert d.num_cached_tokens == 40 * BLOCK
    assert d.reason.startswith("remote: prefill p1 has 40/45 blocks")
    assert d.est_prefill_s < rr_choices[0].est_prefill_s  # p0 would recompute everything


def test_agent_loop_prefills_far_fewer_tokens_than_round_robin() -> None:
    """Steps of 500/1,500/3,500/6,000 tokens re-send the growing conversation: pdserve keeps
    it on one prefill replica, so it computes about the final length only."""
    conv = hashes(6000 // BLOCK)
    cfg = {"local_prefill_max_uncached_tokens": 0}  # isolate the prefill choice

    def computed_tokens(policy: PolicyName) -> int:
        router = RoutingPolicy(PolicyConfig(**cfg), policy=policy)
        index = PrefixIndex(mode="approximate", clock=lambda: 0.0)
        total = 0
        for tokens in (500, 1500, 3500, 6000):
            r = req(tokens, conv[: tokens // BLOCK])
            d = router.decide(r, PREFILL, DECODE, index, OutstandingWork(), 0.0)
            assert d.prefill_replica_id is not None
            index.on_routed(d.prefill_replica_id, r.block_hashes)
            total += tokens - d.num_cached_tokens
        return total

    pdserve, round_robin = computed_tokens("pdserve"), computed_tokens("round_robin")
    assert pdserve < 6300 < 9000 < round_robin


def test_short_request_avoids_prefill_replica_with_long_backlog() -> None:
    work = OutstandingWork()
    work.start("p0", "long", 5.0, 6, now_s=0.0)
    work.start("p1", "small", 0.1, 0, now_s=0.0)
    d = RoutingPolicy().decide(req(1024), PREFILL, DECODE, PrefixIndex(), work, now_s=0.0)
    assert d.prefill_replica_id == "p1"
    assert "p0" not in d.scores, "the lane filter keeps short work off the long lane"
    # Without lanes, the predicted time to first token alone makes the same choice.
    no_lanes = RoutingPolicy(PolicyConfig(lanes=False))
    d = no_lanes.decide(req(1024), PREFILL, DECODE, PrefixIndex(), work, now_s=0.0)
    assert d.prefill_replica_id == "p1"
    assert d.scores["p1"]["predicted_ttft"] == 1.0
    assert d.scores["p0"]["predicted_ttft"] < 0.1
    assert d.predicted_ttft_s["p0"] > 5.0 > d.predicted_ttft_s["p1"]


def test_long_requests_pack_onto_the_long_lane_until_its_backlog_bound() -> None:
    policy, index, work = RoutingPolicy(), PrefixIndex(), OutstandingWork()
    first = policy.decide(req(4096), PREFILL, DECODE, index, work, 0.0)
    assert first.prefill_replica_id is not None
    work.start(first.prefill_replica_id, "l1", first.est_prefill_s, 5, now_s=0.0)
    second = policy.decide(req(4096, ()), PREFILL, DECODE, index, work, 0.0)
    assert second.prefill_replica_id == first.prefill_replica_id
    short = policy.decide(req(64, ()), PREFILL, DECODE, index, work, 0.0)
    assert short.prefill_replica_id != first.prefill_replica_id
    work.start(first.prefill_replica_id, "l2", 5.0, 5, now_s=0.0)  # lane now over 2 s
    spill = policy.decide(req(4096, ()), PREFILL, DECODE, index, work, 0.0)
    assert spill.prefill_replica_id != first.prefill_replica_id


def test_other_routers_backlog_in_snapshot_counts_too() -> None:
    prefill = [snap("p0", queued=50_000), snap("p1", queued=0)]
    d = RoutingPolicy().decide(req(1024), prefill, DECODE, PrefixIndex(), OutstandingWork(), 0.0)
    assert d.prefill_replica_id == "p1"


def test_short_request_gets_served_before_long_one() -> None:
    policy, index, work = RoutingPolicy(), PrefixIndex(), OutstandingWork()
    short = policy.decide(req(512), PREFILL, DECODE, index, work, 0.0)
    long = policy.decide(req(4096), PREFILL, DECODE, index, work, 0.0)
    assert short.engine_priority < long.engine_priority


def test_aging_stops_new_requests_overtaking_a_starving_one() -> None:
    # Spill-over off: a backed-up prefill replica would otherwise send the later request to
    # the idle decode replica, where nothing starves.
    no_spill = PolicyConfig(spill_max_decode_prefill_s=0)
    policy, index, work = RoutingPolicy(no_spill), PrefixIndex(), OutstandingWork()
    prefill = [snap("p0")]
    long = policy.decide(req(4096, request_id="long"), prefill, DECODE, index, work, 0.0)
    work.start("p0", "long", long.est_prefill_s, long.engine_priority, now_s=0.0)
    fresh = policy.decide(req(512), prefill, DECODE, index, work, now_s=0.1)
    starved_at = long.est_prefill_s + policy.config.aging_s + 0.1
    later = policy.decide(req(512), prefill, DECODE, index, work, now_s=starved_at)
    assert fresh.engine_priority < long.engine_priority
    assert later.engine_priority == long.engine_priority


@pytest.mark.parametrize(
    ("uncached_on_decode", "n", "local"),
    [(100, 256, True), (255, 256, True), (256, 256, False), (1000, 256, False), (100, 0, False)],
)
def test_local_prefill_when_decode_holds_almost_all(
    uncached_on_decode: int, n: int, local: bool
) -> None:
    conv = hashes(32)
    index = PrefixIndex()
    index.add_blocks("d1", conv)
    r = req(32 * BLOCK + uncached_on_decode, conv)
    # The threshold rule alone (spill-over off: with it, extending decode's cached prefix
    # is predicted faster than recomputing it all on an idle prefill replica).
    cfg = PolicyConfig(local_prefill_max_uncached_tokens=n, spill_max_decode_prefill_s=0)
    policy = RoutingPolicy(cfg)
    d = policy.decide(r, PREFILL, DECODE, index, OutstandingWork(), 0.0)
    assert d.decode_replica_id == "d1"  # prefix overlap on decode
    assert d.num_cached_tokens_decode == 32 * BLOCK
    assert d.prefill_is_local is local
    if local:
        assert d.prefill_replica_id is None
        assert d.reason == f"local: decode d1 holds all but {uncached_on_decode} tokens (< {n})"
        assert d.num_cached_tokens == 32 * BLOCK
    else:
        assert d.prefill_replica_id in ("p0", "p1")
        assert d.num_cached_tokens == 0


def test_local_prefill_needs_no_prefill_replica() -> None:
    conv = hashes(32)
    index = PrefixIndex()
    index.add_blocks("d0", conv)
    d = RoutingPolicy().decide(req(32 * BLOCK + 10, conv), [], DECODE, index, OutstandingWork(), 0)
    assert d.prefill_replica_id is None


def test_full_decode_replica_is_skipped_despite_its_cache() -> None:
    conv = hashes(32)
    index = PrefixIndex()
    index.add_blocks("d0", conv)
    decode = [snap("d0", "decode", kv=0.99), snap("d1", "decode", kv=0.5)]
    d = RoutingPolicy().decide(req(4096, conv), PREFILL, decode, index, OutstandingWork(), 0.0)
    assert d.decode_replica_id == "d1"
    assert d.prefill_replica_id is not None
    assert "d0" not in d.scores


def test_scores_record_every_candidate() -> None:
    d = RoutingPolicy().decide(req(1024), PREFILL, DECODE, PrefixIndex(), OutstandingWork(), 0.0)
    assert set(d.scores) == {"p0", "p1", "d0", "d1"}
    assert set(d.scores["p0"]) == {"predicted_ttft", "kv_usage", "total"}
    assert set(d.scores["d0"]) == {"prefix_overlap", "running_requests", "kv_usage", "total"}
    assert set(d.predicted_ttft_s) == {"p0", "p1", f"local:{d.decode_replica_id}"}


ALL: list[PolicyName] = ["pdserve", "round_robin", "least_loaded"]


@pytest.mark.parametrize("policy", ALL)
@pytest.mark.parametrize(
    ("prefill", "decode", "pool"),
    [
        ([snap("p0", healthy=False)], DECODE, "prefill"),
        ([], DECODE, "prefill"),
        (PREFILL, [snap("d0", "decode", healthy=False)], "decode"),
        (PREFILL, [], "decode"),
    ],
)
def test_no_healthy_replica(
    policy: PolicyName, prefill: list[ReplicaSnapshot], decode: list[ReplicaSnapshot], pool: str
) -> None:
    with pytest.raises(NoReplicaError, match=f"no healthy {pool} replica") as err:
        RoutingPolicy().decide(
            req(1024), prefill, decode, PrefixIndex(), OutstandingWork(), 0, policy
        )
    assert err.value.pool == pool
    assert isinstance(err.value, RuntimeError)


def test_policy_override_per_request() -> None:
    policy = RoutingPolicy(policy="pdserve")
    index, work = PrefixIndex(), OutstandingWork()
    index.add_blocks("p1", hashes(8))
    r = req(1024)
    assert policy.decide(r, PREFILL, DECODE, index, work, 0.0).prefill_replica_id == "p1"
    rr = [policy.decide(r, PREFILL, DECODE, index, work, 0.0, "round_robin") for _ in range(2)]
    assert [d.prefill_replica_id for d in rr] == ["p0", "p1"]
    assert {d.policy for d in rr} == {"round_robin"}
    assert policy.decide(r, PREFILL, DECODE, index, work, 0.0).policy == "pdserve"


def test_round_robin_skips_unhealthy_and_keeps_pools_independent() -> None:
    prefill = [snap("p2"), snap("p0"), snap("p1", healthy=False)]
    decode = [snap("d0", "decode"), snap("d1", "decode"), snap("d2", "decode")]
    policy = RoutingPolicy(policy="round_robin")
    out = [
        policy.decide(
            req(1024, client_priority=2), prefill, decode, PrefixIndex(), OutstandingWork(), 0
        )
        for _ in range(4)
    ]
    assert [d.prefill_replica_id for d in out] == ["p0", "p2", "p0", "p2"]
    assert [d.decode_replica_id for d in out] == ["d0", "d1", "d2", "d0"]
    assert {d.engine_priority for d in out} == {2}


def test_least_loaded_picks_fewest_requests_ties_by_id() -> None:
    prefill = [snap("p0", running=3), snap("p1", running=1, waiting=1), snap("p2", running=2)]
    decode = [snap("d1", "decode", running=4), snap("d0", "decode", running=4)]
    d = RoutingPolicy(policy="least_loaded").decide(
        req(64, ()), prefill, decode, PrefixIndex(), OutstandingWork(), 0.0
    )
    assert (d.prefill_replica_id, d.decode_replica_id) == ("p1", "d0")  # remote even if short
    assert d.engine_priority == 0
    assert d.reason == "least_loaded: prefill p1 (2 requests), decode d0 (4)"


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown routing policy 'fastest'"):
        RoutingPolicy().decide(
            req(), PREFILL, DECODE, PrefixIndex(), OutstandingWork(), 0.0, cast(Any, "fastest")
        )


def test_block_hashes_must_fit_the_prompt() -> None:
    with pytest.raises(ValueError, match="block_size_tokens"):
        RoutingPolicy().decide(
            req(100, hashes(2)), PREFILL, DECODE, PrefixIndex(), OutstandingWork(), 0
        )


def test_snapshot_in_the_wrong_pool_is_rejected() -> None:
    with pytest.raises(ValueError, match="is a decode replica, passed as prefill"):
        RoutingPolicy().decide(req(1024), DECODE, DECODE, PrefixIndex(), OutstandingWork(), 0)
