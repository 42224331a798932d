"""Prefix index: longest cached prefix per replica, LRU bound, TTL in approximate mode."""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


class ModelIndex:
    """The index's contract in plain dicts: per replica an LRU of hash -> last add/touch time
    (the reference the packed index is checked against)."""

    def __init__(self, capacity: int, ttl_s: float | None) -> None:
        self.capacity = capacity
        self.ttl_s = ttl_s
        self.blocks: dict[str, OrderedDict[int, float]] = {}

    def insert(self, rid: str, hashes: list[int], now: float, touch_only: bool) -> None:
        blocks = self.blocks.setdefault(rid, OrderedDict())
        for h in reversed(hashes):
            if touch_only and h not in blocks:
                continue
            blocks[h] = now
            blocks.move_to_end(h)
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
        if self.ttl_s is not None:
            while blocks and next(iter(blocks.values())) < now - self.ttl_s:
                blocks.popitem(last=False)

    def depth(self, rid: str, hashes: list[int], now: float) -> int:
        blocks = self.blocks.get(rid, {})
        n = 0
        for h in hashes:
            t = blocks.get(h)
            if t is None or (self.ttl_s is not None and t < now - self.ttl_s):
                break
            n += 1
        return n


REPLICAS = [f"r{i}" for i in range(70)]  # more than 64: two bitset words
HASHES = st.lists(st.integers(-6, 20), max_size=12)
OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "route", "clear", "forget", "tick"]),
        st.sampled_from(REPLICAS[:3] + REPLICAS[60:70]) | st.sampled_from(REPLICAS),
        HASHES,
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, queries=st.lists(HASHES, min_size=1, max_size=4), approximate=st.booleans())
def test_packed_index_matches_the_model(
    ops: list[tuple[str, str, list[int]]], queries: list[list[int]], approximate: bool
) -> None:
    """Random event streams: every replica's prefix depth, from both queries, equals the
    plain-dict model's (shared blocks past NARROW_MAX holders, evictions, removals,
    forgotten and reused replica slots, expiry)."""
    clock = FakeClock()
    capacity, ttl = 9, 5.0
    idx = PrefixIndex(
        mode="approximate" if approximate else "events",
        default_max_blocks_per_replica=capacity,
        ttl_s=ttl,
        clock=clock,
    )
    model = ModelIndex(capacity, ttl if approximate else None)
    for op, rid, hashes in ops:
        if op == "add":
            idx.add_blocks(rid, hashes)
            model.insert(rid, hashes, clock.now, touch_only=False)
        elif op == "route":
            idx.on_routed(rid, hashes)
            if approximate or rid in model.blocks:
                model.insert(rid, hashes, clock.now, touch_only=not approximate)
        elif op == "remove":
            idx.remove_blocks(rid, hashes)
            for h in hashes:
                model.blocks.get(rid, OrderedDict()).pop(h, None)
        elif op == "clear":
            idx.clear(rid)
            model.blocks.get(rid, OrderedDict()).clear()
        elif op == "forget":
            idx.forget_replica(rid)
            model.blocks.pop(rid, None)
        else:
            clock.now += 2.0
    for q in queries:
        depths = idx.prefix_depths(q)
        for rid in REPLICAS:
            want = model.depth(rid, q, clock.now)
            assert idx.num_cached_blocks(rid, q) == want, (rid, q)
            slot = idx.slot(rid)
            assert (int(depths[slot]) if slot >= 0 else 0) == want, (rid, q)
    if not approximate:
        for rid in REPLICAS:
            assert idx.num_tracked_blocks(rid) == len(model.blocks.get(rid, ())), rid


def test_a_big_shared_prefix_is_stored_once_per_block() -> None:
    """300 replicas holding one 50-block chain: one table row per block (wide bitsets),
    every replica's depth right."""
    idx = PrefixIndex()
    chain = list(range(1000, 1050))
    for i in range(300):
        idx.add_blocks(f"r{i}", chain[: 1 + i % 50])
    assert idx.num_entries == sum(1 + i % 50 for i in range(300))
    depths = idx.prefix_depths([*chain, 7])
    assert [int(depths[idx.slot(f"r{i}")]) for i in range(300)] == [1 + i % 50 for i in range(300)]
    idx.remove_blocks("r49", chain[10:11])
    assert idx.num_cached_blocks("r49", chain) == 10
    for i in range(300):
        idx.forget_replica(f"r{i}")
    assert idx.num_entries == 0
    assert int(idx.prefix_depths(chain).max()) == 0


def test_growth_keeps_every_entry() -> None:
    """Past the first table, entry and bitset sizes (rehash, backward-shift deletes of moved
    rows): the depths still match the model."""
    rng = random.Random(3)
    idx = PrefixIndex(default_max_blocks_per_replica=2500)
    model = ModelIndex(2500, None)
    shared = [rng.getrandbits(62) for _ in range(200)]
    for step in range(40):
        rid = f"r{step % 20}"
        chain = shared[: rng.randint(1, 200)] + [rng.getrandbits(62) for _ in range(150)]
        idx.add_blocks(rid, chain)
        model.insert(rid, chain, 0.0, touch_only=False)
        gone = rng.sample(chain, 20)
        idx.remove_blocks(rid, gone)
        for h in gone:
            model.blocks[rid].pop(h, None)
    for q in (shared, [*shared[:50], 1, 2]):
        depths = idx.prefix_depths(q)
        for i in range(20):
            assert int(depths[idx.slot(f"r{i}")]) == model.depth(f"r{i}", q, 0.0)
    assert idx.num_entries == sum(len(b) for b in model.blocks.values())
