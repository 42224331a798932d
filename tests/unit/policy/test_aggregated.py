"""RoutingPolicy in an aggregated deployment (no prefill pool): every decision prefills on
the decode replica it picks, and the prefix cache still steers the pick."""

from __future__ import annotations

import pytest

from pdserve.names import PolicyName
from pdserve.router.policy import NoReplicaError, OutstandingWork, PrefixIndex, RoutingPolicy
from tests.unit.policy.factories import BLOCK, hashes, req, snap

DECODE = [snap("d0", "decode"), snap("d1", "decode")]


@pytest.mark.parametrize("policy", ["pdserve", "round_robin", "least_loaded"])
def test_every_policy_prefills_on_the_decode_replica_it_picks(policy: PolicyName) -> None:
    router = RoutingPolicy(policy=policy, aggregated=True)
    r = req(20 * BLOCK, hashes(20))  # long and cold: disaggregated would prefill remotely
    d = router.decide(r, [], DECODE, PrefixIndex(), OutstandingWork(), 0.0)
    assert d.prefill_replica_id is None and d.prefill_is_local
    assert d.decode_replica_id in {"d0", "d1"}
    assert d.est_prefill_s > 0
    assert "aggregated" in d.reason


def test_a_conversation_goes_to_the_replica_that_caches_its_prefix() -> None:
    conv = hashes(30)
    index = PrefixIndex()
    index.add_blocks("d1", conv[:25])
    router = RoutingPolicy(aggregated=True)
    d = router.decide(req(30 * BLOCK, conv), [], DECODE, index, OutstandingWork(), 0.0)
    assert d.decode_replica_id == "d1"
    assert d.num_cached_tokens == 25 * BLOCK
    assert d.reason.startswith(f"aggregated: decode d1 prefills {5 * BLOCK} uncached tokens")


def test_round_robin_alternates_over_decode_only() -> None:
    router = RoutingPolicy(policy="round_robin", aggregated=True)
    r = req(4 * BLOCK, hashes(4))
    picks = [
        router.decide(r, [], DECODE, PrefixIndex(), OutstandingWork(), 0.0).decode_replica_id
        for _ in range(4)
    ]
    assert picks == ["d0", "d1", "d0", "d1"]


def test_no_healthy_decode_replica_is_a_no_replica_error() -> None:
    router = RoutingPolicy(aggregated=True)
    dead = [snap("d0", "decode", healthy=False)]
    with pytest.raises(NoReplicaError):
        router.decide(req(BLOCK, hashes(1)), [], dead, PrefixIndex(), OutstandingWork(), 0.0)


def test_unknown_policy_is_rejected() -> None:
    router = RoutingPolicy(aggregated=True)
    with pytest.raises(ValueError, match="unknown routing policy"):
        router.decide(
            req(BLOCK, hashes(1)), [], DECODE, PrefixIndex(), OutstandingWork(), 0.0,
            policy="fastest",  # type: ignore[arg-type]
        )  # fmt: skip
