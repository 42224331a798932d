"""Placement enforcement in the request router: the chosen replica, a bounded wait while it is
busy, then the least-loaded replica."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pdserve.router.replica_router import rank_replicas


@dataclass(frozen=True)
class _Id:
    unique_id: str


@dataclass(frozen=True)
class _Replica:
    replica_id: _Id
    routing_stats: dict[str, Any] | None = field(default=None, hash=False)


def _replica(name: str, running: int = 0, waiting: int = 0) -> _Replica:
    stats = {"num_running_requests": running, "num_waiting_requests": waiting}
    return _Replica(_Id(name), stats)


A, B, C = _replica("a", running=3), _replica("b", running=1), _replica("c", waiting=2)
KNOWN = {"a", "b", "c"}


def test_the_target_alone_when_it_can_take_the_request() -> None:
    assert rank_replicas("c", [A, B, C], KNOWN, waited_s=0.0, busy_wait_s=5.0) == ([C], None)


def test_a_busy_target_is_waited_for_until_the_bound() -> None:
    # Ray Serve leaves a replica at capacity out of the candidates: [] means "ask me again".
    assert rank_replicas("a", [B, C], KNOWN, waited_s=4.9, busy_wait_s=5.0) == ([], None)


def test_past_the_bound_the_least_loaded_replica_takes_it() -> None:
    ranked, why = rank_replicas("a", [C, B], KNOWN, waited_s=5.0, busy_wait_s=5.0)
    assert ranked == [B, C]
    assert why == "busy for 5.0 s"


def test_a_gone_target_is_not_waited_for() -> None:
    ranked, why = rank_replicas("x", [A, B], KNOWN, waited_s=0.0, busy_wait_s=5.0)
    assert ranked == [B, A] and why == "is gone"


def test_no_target_is_placed_by_load_and_ties_by_id() -> None:
    twin = _replica("0", running=1)
    ranked, why = rank_replicas(None, [A, B, twin], KNOWN, waited_s=0.0, busy_wait_s=5.0)
    assert ranked == [twin, B, A] and why is None


def test_replicas_without_stats_count_as_idle() -> None:
    fresh = _Replica(_Id("d"), None)
    ranked, _ = rank_replicas(None, [B, fresh], KNOWN | {"d"}, waited_s=0.0, busy_wait_s=5.0)
    assert ranked == [fresh, B]
