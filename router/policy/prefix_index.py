"""Which full prompt blocks each replica holds in its KV cache, by the router's block hash.

Writers: in "events" mode an adapter turns the engines' KV cache events into `add_blocks` /
`remove_blocks` / `clear` (vLLM BlockStored / BlockRemoved / AllBlocksCleared); in both modes
the router calls `on_routed` after sending a request's prefill to a replica. The replica set
code calls `set_capacity` (from the engine's KV block count) and `forget_replica`.
Reader: the routing pipeline calls `num_cached_blocks` once per candidate replica per request.

Two modes share one structure, a per-replica LRU (`OrderedDict` hash -> last add/touch time):
- "events": precise. Entries come only from engine events; `on_routed` only refreshes the
  recency of blocks already present (the engine just reused them). No expiry.
- "approximate": for engines without KV events. `on_routed` inserts the prompt's blocks, and
  every entry expires `ttl_s` after it was last added or touched (read from the injected clock).

Chains are inserted tail first, so the first block of a prompt is the most recently used and
LRU eviction removes deep blocks before the shared prefix they extend (as vLLM itself evicts
a freed request's blocks tail first). Capacity is per replica; exceeding it evicts the least
recently added/touched blocks. Not thread-safe: call from the router's event loop.
Every operation is O(number of hashes passed) (amortised O(1) per hash).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

PrefixIndexMode = Literal["events", "approximate"]


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
        self._default_capacity = default_max_blocks_per_replica
        self._ttl_s = ttl_s
        self._clock = clock
        self._blocks: dict[str, OrderedDict[int, float]] = {}
        self._capacity: dict[str, int] = {}

    @property
    def mode(self) -> PrefixIndexMode:
        return self._mode

    # ---- queries (pipeline, once per candidate per request; no side effects) ----

    def num_cached_blocks(self, replica_id: str, block_hashes: Sequence[int]) -> int:
        """Length of the longest prefix of `block_hashes` all held by `replica_id`.

        Stops at the first miss: hashes are chained, so a later block without its
        predecessors cannot be reused. An unknown replica holds nothing (0). Read-only.
        """
        blocks = self._blocks.get(replica_id)
        if not blocks:
            return 0
        n = 0
        if self._mode == "events":
            for h in block_hashes:
                if h not in blocks:
                    break
                n += 1
            return n
        cutoff = self._clock() - self._ttl_s
        for h in block_hashes:
            t = blocks.get(h)
            if t is None or t < cutoff:
                break
            n += 1
        return n

    def num_tracked_blocks(self, replica_id: str) -> int:
        """Entries held for `replica_id` (expired ones may linger until the next write)."""
        return len(self._blocks.get(replica_id, ()))

    def replica_ids(self) -> list[str]:
        """Replicas with any tracked block, sorted."""
        return sorted(r for r, b in self._blocks.items() if b)

    # ---- writers ----

    def add_blocks(self, replica_id: str, block_hashes: Sequence[int]) -> None:
        """Record blocks the replica now holds (KV event adapter: BlockStored; chain order)."""
        self._insert(replica_id, block_hashes)

    def remove_blocks(self, replica_id: str, block_hashes: Iterable[int]) -> None:
        """Record blocks the replica evicted (BlockRemoved). Unknown hashes are ignored: the
        index may already have evicted them under its own bound."""
        blocks = self._blocks.get(replica_id)
        if blocks is None:
            return
        for h in block_hashes:
            blocks.pop(h, None)

    def clear(self, replica_id: str) -> None:
        """The replica dropped its whole cache (AllBlocksCleared, engine restart). Its
        capacity setting is kept."""
        blocks = self._blocks.get(replica_id)
        if blocks is not None:
            blocks.clear()

    def on_routed(self, replica_id: str, block_hashes: Sequence[int]) -> None:
        """The router sent a prefill of these blocks to `replica_id` (once per request).

        Approximate mode: insert/refresh them (the engine will hold them soon). Events mode:
        only refresh the recency of blocks already present; new ones arrive as events.
        """
        if self._mode == "approximate":
            self._insert(replica_id, block_hashes)
            return
        blocks = self._blocks.get(replica_id)
        if not blocks:
            return
        now = self._clock()
        for h in reversed(block_hashes):
            if h in blocks:
                blocks[h] = now
                blocks.move_to_end(h)

    def set_capacity(self, replica_id: str, max_blocks: int) -> None:
        """Bound `replica_id`'s entries, normally to its engine's KV block count (at start-up,
        once per replica). Evicts the least recent entries if already above."""
        if max_blocks < 1:
            raise ValueError(f"max_blocks for {replica_id} must be >= 1, got {max_blocks}")
        self._capacity[replica_id] = max_blocks
        blocks = self._blocks.get(replica_id)
        if blocks is not None:
            while len(blocks) > max_blocks:
                blocks.popitem(last=False)

    def forget_replica(self, replica_id: str) -> None:
        """The replica is gone (scaled down, replaced): drop its entries and capacity."""
        self._blocks.pop(replica_id, None)
        self._capacity.pop(replica_id, None)

    def _insert(self, replica_id: str, block_hashes: Sequence[int]) -> None:
        blocks = self._blocks.get(replica_id)
        if blocks is None:
            blocks = self._blocks[replica_id] = OrderedDict()
        now = self._clock()
        for h in reversed(block_hashes):  # tail first: the prompt's first block ends newest
            blocks[h] = now
            blocks.move_to_end(h)
        capacity = self._capacity.get(replica_id, self._default_capacity)
        while len(blocks) > capacity:
            blocks.popitem(last=False)
        if self._mode == "approximate":
            cutoff = now - self._ttl_s
            while blocks:
                oldest = next(iter(blocks.values()))
                if oldest >= cutoff:
                    break
                blocks.popitem(last=False)
