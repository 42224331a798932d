"""Subscribes to one engine's KV cache events (vLLM ZMQ publisher) and keeps the router's
prefix index in step with what that replica really holds.

One `KVEventSubscriber` per replica, owned by the ReplicaView, started when the replica's
routing stats first show its `kv_events_endpoint`, closed when the replica goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

import numpy as np

from pdserve.router.block_hashes import ROOT_HASH, chained
from pdserve.router.int_map import IntMap, as_int64

log = logging.getLogger("pdserve.router")


class BlockSink(Protocol):
    """What the subscriber updates (the policy's PrefixIndex satisfies it)."""

    def add_blocks(self, replica_id: str, block_hashes: list[int]) -> None: ...
    def remove_blocks(self, replica_id: str, block_hashes: list[int]) -> None: ...
    def clear(self, replica_id: str) -> None: ...


class EventTranslator:
    """Maps one engine's block hashes onto the router's chained hashes (pure).

    Memory: one packed entry (engine hash → ours, router/int_map.py: 20-30 bytes) per block
    the engine currently holds. Engine hashes are vLLM's 64-bit ints (its default,
    VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1) or bytes (keyed by their last 8 bytes).
    """

    def __init__(self, replica_id: str, sink: BlockSink):
        self._replica_id = replica_id
        self._sink = sink
        self._ours = IntMap()

    @property
    def num_blocks(self) -> int:
        """Engine blocks it maps (the engine's cached blocks it has seen stored)."""
        return len(self._ours)

    @property
    def nbytes(self) -> int:
        """Bytes of its map's arrays."""
        return self._ours.nbytes

    def block_stored(
        self, engine_hashes: list[Any], parent: Any, token_ids: list[int], block_size: int
    ) -> None:
        ours_parent = ROOT_HASH if parent is None else self._ours.get(int(as_int64([parent])[0]))
        if ours_parent is None:
            return  # parent evicted or unseen (subscribed mid-stream): cannot chain
        full = min(len(engine_hashes), len(token_ids) // block_size)
        added = chained(ours_parent, token_ids[: full * block_size], block_size)
        if added:
            keys = as_int64(engine_hashes[: len(added)])
            self._ours.put_many(keys, np.array(added, dtype=np.int64))
            self._sink.add_blocks(self._replica_id, added)

    def block_removed(self, engine_hashes: list[Any]) -> None:
        removed = self._ours.pop_many(as_int64(engine_hashes))
        if len(removed):
            self._sink.remove_blocks(self._replica_id, removed.tolist())

    def all_cleared(self) -> None:
        self._ours.clear()
        self._sink.clear(self._replica_id)


def load_vllm_event_types() -> None:
    """Imports vLLM's KV event types, which imports vLLM, torch and openai: about 1,700
    modules and a few seconds.

    The router calls this while its replica starts (router/deployment.py), so that neither the
    import (which blocks the event loop) nor the first full garbage collection over the
    objects it creates lands on a request: Ray Serve collects and freezes the heap once a
    replica's constructor returns, and the collector never scans frozen objects again. Left
    to the first subscriber, the import stalled the first /ready for 3.5 s and the objects it
    made set off 150-400 ms full collections about ten seconds into the first load
    (bench/RESULTS.md, "CPU-host effects we measured and fixed"; the measurements are in its
    git history)."""
    import vllm.distributed.kv_events  # noqa: F401


class KVEventSubscriber:
    """Reads `KVEventBatch` messages from one engine's ZMQ publisher."""

    def __init__(self, replica_id: str, endpoint: str, sink: BlockSink):
        self.replica_id = replica_id
        self.endpoint = endpoint
        self._translator = EventTranslator(replica_id, sink)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        import msgspec
        import zmq
        import zmq.asyncio
        from vllm.distributed.kv_events import (  # imported already: load_vllm_event_types
            AllBlocksCleared,
            BlockRemoved,
            BlockStored,
            KVEventBatch,
        )

        decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        ctx = zmq.asyncio.Context.instance()
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint)
        log.info("subscribed to KV events of %s at %s", self.replica_id, self.endpoint)
        t = self._translator
        try:
            while True:
                frames = await sock.recv_multipart()
                try:
                    batch = decoder.decode(frames[-1])
                except msgspec.DecodeError:
                    continue
                for ev in batch.events:
                    if isinstance(ev, BlockStored):
                        t.block_stored(
                            ev.block_hashes, ev.parent_block_hash, ev.token_ids, ev.block_size
                        )
                    elif isinstance(ev, BlockRemoved):
                        t.block_removed(ev.block_hashes)
                    elif isinstance(ev, AllBlocksCleared):
                        t.all_cleared()
        finally:
            sock.close()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None


def warm_up_kernels() -> None:
    """Compile (or load from numba's disk cache) the hash-map kernels a KV event uses: the
    router calls it at start-up, not on its first event."""
    from pdserve.router.policy.prefix_index import PrefixIndex

    translator = EventTranslator("warm-up", PrefixIndex())
    translator.block_stored([1, 2], None, list(range(32)), 16)
    translator.block_removed([2, 3])
    translator.all_cleared()
