"""Which full prompt blocks each replica holds in its KV cache, by the router's block hash.

Writers: in "events" mode an adapter turns the engines' KV cache events into `add_blocks` /
`remove_blocks` / `clear` (vLLM BlockStored / BlockRemoved / AllBlocksCleared); in both modes
the router calls `on_routed` after sending a request's prefill to a replica. The replica set
code calls `set_capacity` (from the engine's KV block count) and `forget_replica`.
Readers: the routing pipeline calls `prefix_depths` once per request (every replica's cached
prefix in one pass) or `num_cached_blocks` for one replica.

Two modes share one structure, a per-replica LRU over packed arrays (block_table.py: one row
per distinct block, shared by its holders; one small row per (replica, block) entry):
- "events": precise. Entries come only from engine events; `on_routed` only refreshes the
  recency of blocks already present (the engine just reused them). No expiry.
- "approximate": for engines without KV events. `on_routed` inserts the prompt's blocks, and
  every entry expires `ttl_s` after it was last added or touched (read from the injected clock;
  kept as float32 seconds since the index was made: 0.1 s resolution after 10 days).

Chains are inserted tail first, so the first block of a prompt is the most recently used and
LRU eviction removes deep blocks before the shared prefix they extend (as vLLM itself evicts
a freed request's blocks tail first). Capacity is per replica; exceeding it evicts the least
recently added/touched blocks. Not thread-safe: call from the router's event loop.
Writes cost O(hashes passed) amortised; `prefix_depths` O(matched prefix x replicas / 64 +
replicas holding its first block); `num_cached_blocks` O(matched prefix).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import numpy as np

from pdserve.router.policy import block_table as bt

PrefixIndexMode = Literal["events", "approximate"]

_FIRST_ROWS = 1024
_ENTRY_GROWTH = 1.25
_TABLE_GROWTH = 1.5
_WIDE_GROWTH = 1.5


def _grown(a: np.ndarray, n: int, fill: int = 0) -> np.ndarray:
    out = np.full((n, *a.shape[1:]), fill, dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


class PrefixIndex:
    """Per-replica sets of cached block hashes with longest-prefix queries and an LRU bound."""

    def __init__(
        self,
        *,
        mode: PrefixIndexMode = "events",
        default_max_blocks_per_replica: int = 100_000,
        ttl_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`default_max_blocks_per_replica`: the bound for replicas without `set_capacity`.
        `ttl_s`: lifetime of an entry after its last add/touch, approximate mode only."""
        if mode not in ("events", "approximate"):
            raise ValueError(f"mode must be 'events' or 'approximate', got {mode!r}")
        if default_max_blocks_per_replica < 1:
            raise ValueError("default_max_blocks_per_replica must be >= 1")
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
        self._mode: PrefixIndexMode = mode
        self._stamped = mode == "approximate"
        self._default_capacity = default_max_blocks_per_replica
        self._ttl_s = ttl_s
        self._clock = clock
        self._epoch_s = clock()
        self._slot: dict[str, int] = {}
        self._free_slots: list[int] = []
        self._p = self._empty(_FIRST_ROWS, _FIRST_ROWS, 16, 64)
        self._wmap = bt.new_wmap()
        self._depth = np.zeros(17, dtype=np.int32)
        self._slots_version = 0

    def _empty(self, table_rows: int, entries: int, replicas: int, wide_rows: int) -> bt.Packed:
        words = (replicas + 63) // 64
        meta = np.zeros(bt.META_LEN, dtype=np.int64)
        meta[bt.M_FREE_E] = -1
        meta[bt.M_FREE_W] = -1
        return bt.Packed(
            t=bt.new_table(table_rows),
            e_rep=np.full(entries, -1, dtype=np.int16),
            e_blk=np.zeros(entries, dtype=np.int32),
            e_hnext=np.zeros(entries, dtype=np.int32),
            e_lprev=np.zeros(entries, dtype=np.int32),
            e_lnext=np.zeros(entries, dtype=np.int32),
            e_stamp=np.zeros(entries if self._stamped else 1, dtype=np.float32),
            r_head=np.full(replicas, -1, dtype=np.int32),
            r_tail=np.full(replicas, -1, dtype=np.int32),
            r_count=np.zeros(replicas, dtype=np.int64),
            r_cap=np.full(replicas, self._default_capacity, dtype=np.int64),
            w_bits=np.zeros((wide_rows, words), dtype=np.uint64),
            w_next=np.zeros(wide_rows, dtype=np.int32),
            meta=meta,
        )

    @property
    def mode(self) -> PrefixIndexMode:
        return self._mode

    @property
    def nbytes(self) -> int:
        """Bytes the index's arrays hold (allocated rows, used or not; the wide rows' lookup
        map counted at 40 bytes an item)."""
        arrays = (a for a in self._p if isinstance(a, np.ndarray))
        return sum(a.nbytes for a in arrays) + 40 * len(self._wmap)

    @property
    def num_entries(self) -> int:
        """(replica, block) entries held."""
        return int(self._p.meta[bt.M_ENTRIES])

    # ---- queries (no side effects in events mode) ----

    def slot(self, replica_id: str) -> int:
        """The replica's row in `prefix_depths`' result, or -1 when it holds nothing."""
        return self._slot.get(replica_id, -1)

    @property
    def slots_version(self) -> int:
        """Changes whenever a replica gets or loses its slot (cache `slot()` results by it)."""
        return self._slots_version

    def prefix_depths(self, block_hashes: Sequence[int]) -> np.ndarray:
        """Every replica's longest held prefix of `block_hashes`, as an int32 array indexed by
        `slot(replica_id)`; its last element is always 0, so indexing it with slot -1 (a
        replica the index does not know) gives 0. Valid until the next call. In approximate
        mode it first drops expired entries."""
        if self._stamped:
            bt.expire_all(self._p, self._wmap, self._now() - self._ttl_s)
        keys = np.asarray(block_hashes, dtype=np.int64)
        bt.prefix_depths(self._p, keys, self._depth)
        return self._depth

    def num_cached_blocks(self, replica_id: str, block_hashes: Sequence[int]) -> int:
        """Length of the longest prefix of `block_hashes` all held by `replica_id`.

        Stops at the first miss: hashes are chained, so a later block without its
        predecessors cannot be reused. An unknown replica holds nothing (0). Read-only.
        """
        rep = self._slot.get(replica_id)
        if rep is None or not block_hashes:
            return 0
        cutoff = self._now() - self._ttl_s if self._stamped else 0.0
        keys = np.fromiter(block_hashes, dtype=np.int64, count=len(block_hashes))
        return int(bt.held_prefix(self._p, self._wmap, rep, keys, cutoff, self._stamped))

    def num_tracked_blocks(self, replica_id: str) -> int:
        """Entries held for `replica_id` (expired ones may linger until the next write)."""
        rep = self._slot.get(replica_id)
        return 0 if rep is None else int(self._p.r_count[rep])

    def replica_ids(self) -> list[str]:
        """Replicas with any tracked block, sorted."""
        counts = self._p.r_count
        return sorted(r for r, s in self._slot.items() if counts[s] > 0)

    # ---- writers ----

    def add_blocks(self, replica_id: str, block_hashes: Sequence[int]) -> None:
        """Record blocks the replica now holds (KV event adapter: BlockStored; chain order)."""
        self._insert(replica_id, block_hashes, touch_only=False)

    def remove_blocks(self, replica_id: str, block_hashes: Iterable[int]) -> None:
        """Record blocks the replica evicted (BlockRemoved). Unknown hashes are ignored: the
        index may already have evicted them under its own bound."""
        rep = self._slot.get(replica_id)
        if rep is None:
            return
        bt.remove(self._p, self._wmap, rep, np.fromiter(block_hashes, dtype=np.int64))

    def clear(self, replica_id: str) -> None:
        """The replica dropped its whole cache (AllBlocksCleared, engine restart). Its
        capacity setting is kept."""
        rep = self._slot.get(replica_id)
        if rep is not None:
            bt.clear(self._p, self._wmap, rep)

    def on_routed(self, replica_id: str, block_hashes: Sequence[int]) -> None:
        """The router sent a prefill of these blocks to `replica_id` (once per request).

        Approximate mode: insert/refresh them (the engine will hold them soon). Events mode:
        only refresh the recency of blocks already present; new ones arrive as events.
        """
        if self._stamped:
            self._insert(replica_id, block_hashes, touch_only=False)
        elif replica_id in self._slot:
            self._insert(replica_id, block_hashes, touch_only=True)

    def set_capacity(self, replica_id: str, max_blocks: int) -> None:
        """Bound `replica_id`'s entries, normally to its engine's KV block count (at start-up,
        once per replica). Evicts the least recent entries if already above."""
        if max_blocks < 1:
            raise ValueError(f"max_blocks for {replica_id} must be >= 1, got {max_blocks}")
        rep = self._slot_for(replica_id)
        self._p.r_cap[rep] = max_blocks
        bt.shrink(self._p, self._wmap, rep)

    def forget_replica(self, replica_id: str) -> None:
        """The replica is gone (scaled down, replaced): drop its entries and capacity."""
        rep = self._slot.pop(replica_id, None)
        if rep is None:
            return
        bt.clear(self._p, self._wmap, rep)
        self._p.r_cap[rep] = self._default_capacity
        self._free_slots.append(rep)
        self._slots_version += 1

    # ---- internals ----

    def _now(self) -> float:
        return self._clock() - self._epoch_s

    def _slot_for(self, replica_id: str) -> int:
        rep = self._slot.get(replica_id)
        if rep is not None:
            return rep
        if self._free_slots:
            rep = self._free_slots.pop()
        else:
            rep = len(self._slot)
            if rep >= bt.REPLICA_SLOT_LIMIT:
                raise ValueError(f"the prefix index holds at most {bt.REPLICA_SLOT_LIMIT} replicas")
            if rep >= self._p.r_head.shape[0]:
                self._grow_replicas(2 * self._p.r_head.shape[0])
        self._slot[replica_id] = rep
        self._slots_version += 1
        return rep

    def _insert(self, replica_id: str, block_hashes: Sequence[int], *, touch_only: bool) -> None:
        if not block_hashes:
            return
        rep = self._slot_for(replica_id)
        keys = np.fromiter(block_hashes, dtype=np.int64, count=len(block_hashes))
        n = len(keys)
        if not touch_only:
            self._make_room(n)
        now = self._now()
        bt.add(self._p, self._wmap, rep, keys, now, touch_only, self._stamped)
        if self._stamped:  # a write purges the replica's expired entries
            bt.expire(self._p, self._wmap, rep, now - self._ttl_s)

    def _make_room(self, n: int) -> None:
        """Grow the arrays so that `n` more blocks, entries and wide rows fit."""
        p = self._p
        meta = p.meta
        entries = p.e_rep.shape[0]
        if meta[bt.M_HW_E] + n > entries:  # the free list may hold fewer than n
            size = max(int(entries * _ENTRY_GROWTH), int(meta[bt.M_HW_E]) + n)
            p = p._replace(
                e_rep=_grown(p.e_rep, size, -1),
                e_blk=_grown(p.e_blk, size),
                e_hnext=_grown(p.e_hnext, size),
                e_lprev=_grown(p.e_lprev, size),
                e_lnext=_grown(p.e_lnext, size),
                e_stamp=_grown(p.e_stamp, size) if self._stamped else p.e_stamp,
            )
        wide = p.w_next.shape[0]
        if meta[bt.M_HW_W] + n > wide:
            size = max(int(wide * _WIDE_GROWTH), int(meta[bt.M_HW_W]) + n)
            p = p._replace(w_bits=_grown(p.w_bits, size), w_next=_grown(p.w_next, size))
        rows = p.t.shape[0]
        if meta[bt.M_BLOCKS] + n > bt.MAX_LOAD * rows:
            size = max(int(rows * _TABLE_GROWTH), int((meta[bt.M_BLOCKS] + n) / bt.MAX_LOAD) + 1)
            bigger = p._replace(
                t=bt.new_table(size),
                meta=meta.copy(),
            )
            bigger.meta[bt.M_BLOCKS] = 0
            bt.rehash(p, bigger)
            p = bigger
        self._p = p

    def _grow_replicas(self, size: int) -> None:
        p = self._p
        words = (size + 63) // 64
        bits = np.zeros((p.w_bits.shape[0], words), dtype=np.uint64)
        bits[:, : p.w_bits.shape[1]] = p.w_bits
        self._p = p._replace(
            r_head=_grown(p.r_head, size, -1),
            r_tail=_grown(p.r_tail, size, -1),
            r_count=_grown(p.r_count, size),
            r_cap=_grown(p.r_cap, size, self._default_capacity),
            w_bits=bits,
        )
        self._depth = np.zeros(size + 1, dtype=np.int32)
