"""Prefix index: longest cached prefix per replica, LRU bound, TTL in approximate mode."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pdserve.router.policy import PrefixIndex


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("held", "query", "want"),
    [
        ([], [1, 2, 3], 0),
        ([1, 2, 3], [], 0),
        ([1, 2, 3], [1, 2, 3], 3),
        ([1, 2, 3], [1, 2, 3, 4, 5], 3),
        ([1, 2], [1, 2, 3], 2),
        ([2, 3], [1, 2, 3], 0),  # chained: without block 1 nothing after it is reusable
        ([1, 3, 4], [1, 2, 3, 4], 1),  # stops at the first miss
        ([1, 2, 3, 9], [1, 2, 8, 9], 2),
    ],
)
def test_longest_cached_prefix(held: list[int], query: list[int], want: int) -> None:
    idx = PrefixIndex()
    idx.add_blocks("p0", held)
    assert idx.num_cached_blocks("p0", query) == want


def test_replicas_are_independent_and_unknown_holds_nothing() -> None:
    idx = PrefixIndex()
    idx.add_blocks("p0", [1, 2])
    idx.add_blocks("p1", [1])
    assert (idx.num_cached_blocks("p0", [1, 2]), idx.num_cached_blocks("p1", [1, 2])) == (2, 1)
    assert idx.num_cached_blocks("nope", [1, 2]) == 0
    assert idx.replica_ids() == ["p0", "p1"]


def test_remove_clear_forget() -> None:
    idx = PrefixIndex()
    idx.add_blocks("p0", [1, 2, 3])
    idx.add_blocks("p1", [1, 2, 3])
    idx.remove_blocks("p0", [2, 42])  # unknown hashes are ignored
    assert idx.num_cached_blocks("p0", [1, 2, 3]) == 1
    idx.clear("p0")
    assert idx.num_cached_blocks("p0", [1]) == 0
    idx.remove_blocks("gone", [1])
    idx.forget_replica("p1")
    assert idx.num_cached_blocks("p1", [1]) == 0
    assert idx.replica_ids() == []


def test_lru_bound_evicts_least_recent_and_deep_blocks_first() -> None:
    idx = PrefixIndex(default_max_blocks_per_replica=4)
    idx.add_blocks("p0", [1, 2, 3])  # chain A
    idx.add_blocks("p0", [10, 11, 12])  # chain B pushes out A's tail first: 3, then 2
    assert idx.num_tracked_blocks("p0") == 4
    assert idx.num_cached_blocks("p0", [10, 11, 12]) == 3
    assert idx.num_cached_blocks("p0", [1, 2, 3]) == 1  # A's first block survived


def test_touch_on_routed_protects_blocks_in_events_mode() -> None:
    idx = PrefixIndex(default_max_blocks_per_replica=4)
    idx.add_blocks("p0", [1, 2])
    idx.add_blocks("p0", [10, 11])
    idx.on_routed("p0", [1, 2, 99])  # reused 1, 2; 99 is not added without an event
    idx.add_blocks("p0", [20, 21])  # evicts 10, 11 (least recent), not 1, 2
    assert idx.num_cached_blocks("p0", [1, 2, 99]) == 2
    assert idx.num_cached_blocks("p0", [10, 11]) == 0
    assert idx.num_tracked_blocks("p0") == 4


def test_set_capacity_per_replica_evicts_now() -> None:
    idx = PrefixIndex(default_max_blocks_per_replica=100)
    idx.add_blocks("p0", list(range(10)))
    idx.set_capacity("p0", 3)
    assert idx.num_tracked_blocks("p0") == 3
    assert idx.num_cached_blocks("p0", list(range(10))) == 3
    idx.add_blocks("p1", list(range(10)))
    assert idx.num_tracked_blocks("p1") == 10
    with pytest.raises(ValueError, match="max_blocks"):
        idx.set_capacity("p0", 0)


def test_approximate_mode_records_routing_and_expires() -> None:
    clock = FakeClock()
    idx = PrefixIndex(mode="approximate", ttl_s=10.0, clock=clock)
    idx.on_routed("p0", [1, 2, 3])
    clock.now += 6
    idx.on_routed("p0", [1, 2])  # refreshes the first two only
    clock.now += 6  # block 3 is 12 s old, 1 and 2 are 6 s old
    assert idx.num_cached_blocks("p0", [1, 2, 3]) == 2
    clock.now += 5
    assert idx.num_cached_blocks("p0", [1, 2, 3]) == 0
    idx.on_routed("p0", [7])  # a write purges the expired entries
    assert idx.num_tracked_blocks("p0") == 1


def test_events_mode_never_expires() -> None:
    clock = FakeClock()
    idx = PrefixIndex(mode="events", ttl_s=1.0, clock=clock)
    idx.add_blocks("p0", [1, 2])
    clock.now += 1e6
    assert idx.num_cached_blocks("p0", [1, 2]) == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "guess"}, "mode"),
        ({"default_max_blocks_per_replica": 0}, "default_max_blocks"),
        ({"ttl_s": 0.0}, "ttl_s"),
    ],
)
def test_bad_construction(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PrefixIndex(**kwargs)


class CountingHashes(tuple[int, ...]):
    """A prompt's hashes that count how many the index reads."""

    reads = 0

    def __iter__(self) -> Iterator[int]:
        for h in super().__iter__():
            type(self).reads += 1
            yield h


def test_query_reads_each_hash_at_most_once_and_stops_at_first_miss() -> None:
    idx = PrefixIndex()
    idx.add_blocks("p0", list(range(100_000)))  # a big cache must not make queries slower
    prompt = CountingHashes([0, 1, 2, -1, *range(3, 10_000)])
    assert idx.num_cached_blocks("p0", prompt) == 3
    assert CountingHashes.reads == 4
