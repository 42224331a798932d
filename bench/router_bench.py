"""`pdserve bench-router`: what one routing decision costs at fleet size (pure: no engines, no
Ray, no HTTP).

For each fleet (replicas per pool) and index size ((replica, block) entries in all), it builds
synthetic replica snapshots with random loads, fills the real `PrefixIndex` with KV-event
events of 64 blocks through the router's KV-event translator (timed: ingest rate; the index's
and the translators' arrays: bytes per million entries), then
times `RoutingPolicy.decide` (the real pipeline, policy pdserve) on prompts of 100 blocks whose
first blocks most replicas hold to different depths (a shared system prompt and conversation,
partially evicted), as process CPU time per decision, with the router's own in-flight work
and open streams on two requests per replica of a pool (a loaded router). Every fleet is also
given as a ratio to the smallest one measured in the same run.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psutil
from rich.table import Table

from pdserve.router.block_hashes import block_hashes
from pdserve.router.kv_events import EventTranslator
from pdserve.router.policy import ReplicaSnapshot, RequestSummary
from pdserve.router.policy.pipeline import RoutingPolicy
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.policy.state import OpenStreams, OutstandingWork

BLOCK_TOKENS = 16
PROMPT_BLOCKS = 100
SHARED_BLOCKS = 60
HOLDER_SHARE = 0.8
"""Share of the replicas that hold some of the shared prefix (to a random depth)."""
EVENT_BATCH = 64


@dataclass(frozen=True)
class FleetRow:
    replicas_per_pool: int
    entries: int
    decision_p50_us: float
    decision_p99_us: float
    index_bytes_per_million: float
    """The prefix index's arrays per million (replica, block) entries."""
    ingest_events_per_s: float
    """Block events per second through the KV-event translator into the index."""
    index_ingest_events_per_s: float = 0.0
    """Block events per second of the index's own share (`add_blocks`) of that time."""
    translator_bytes_per_million: float = 0.0
    """The KV-event translators' engine → router hash maps, per million entries."""
    rss_growth_bytes_per_million: float = 0.0
    """The process's resident memory growth while the index filled (includes the kernels'
    one-off compilation or cache load at the first fleet)."""


@dataclass
class Fleet:
    prefill: list[ReplicaSnapshot]
    decode: list[ReplicaSnapshot]
    index: PrefixIndex
    shared: list[int]
    ingest_s: float
    index_ingest_s: float
    index_bytes: int
    translator_bytes: int
    rss_bytes: int


def _snapshots(pool: str, n: int, rng: random.Random) -> list[ReplicaSnapshot]:
    return [
        ReplicaSnapshot(
            replica_id=f"{pool[0]}{i:04d}",
            pool=pool,  # type: ignore[arg-type]
            num_running_requests=rng.randrange(0, 32),
            num_waiting_requests=rng.randrange(0, 4),
            kv_cache_usage=rng.random() * 0.9,
            queued_prefill_tokens=rng.randrange(0, 8000),
            num_queued_prefills=rng.randrange(0, 4),
        )
        for i in range(n)
    ]


def _rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


class _TimedSink:
    """The index as the translators' sink, timing its `add_blocks` (the index's share)."""

    def __init__(self, index: PrefixIndex) -> None:
        self._index = index
        self.add_s = 0.0

    def add_blocks(self, replica_id: str, block_hashes: list[int]) -> None:
        start = time.perf_counter()
        self._index.add_blocks(replica_id, block_hashes)
        self.add_s += time.perf_counter() - start

    def remove_blocks(self, replica_id: str, block_hashes: list[int]) -> None:
        self._index.remove_blocks(replica_id, block_hashes)

    def clear(self, replica_id: str) -> None:
        self._index.clear(replica_id)


def build_fleet(
    replicas_per_pool: int,
    entries: int,
    rng: random.Random,
    make_index: Callable[[], PrefixIndex] = lambda: PrefixIndex(
        mode="events", default_max_blocks_per_replica=1 << 40
    ),
) -> Fleet:
    """Snapshots of both pools and an index holding `entries` (replica, block) entries, fed
    the way the router is: vLLM BlockStored events of 64 blocks (engine hashes, parent, token
    ids) through each replica's real `EventTranslator` (the router's chained hash of each
    block's tokens, the engine → router hash map) into the index. Each holder replica holds
    the shared chain to a random depth, every replica fills up to its share with blocks of
    its own (one chain per replica). Timed: the translator and index calls, not the event
    generation."""
    prefill = _snapshots("prefill", replicas_per_pool, rng)
    decode = _snapshots("decode", replicas_per_pool, rng)
    shared_tokens = [rng.randrange(50_000) for _ in range(SHARED_BLOCKS * BLOCK_TOKENS)]
    shared = list(block_hashes(shared_tokens, BLOCK_TOKENS))
    shared_engine = [rng.getrandbits(64) for _ in range(SHARED_BLOCKS)]
    filler = [rng.randrange(50_000) for _ in range(EVENT_BATCH * BLOCK_TOKENS)]
    replicas = [s.replica_id for s in prefill + decode]
    per_replica = max(1, entries // len(replicas))
    before = _rss()
    index = make_index()
    translators = []
    timed = _TimedSink(index)
    ingest_s = 0.0
    for rid in replicas:  # one replica's events at a time: generating them is not timed
        depth = rng.randint(1, SHARED_BLOCKS) if rng.random() < HOLDER_SHARE else 0
        depth = min(depth, per_replica)
        events: list[tuple[list[int], int | None, list[int]]] = []
        if depth:
            events.append((shared_engine[:depth], None, shared_tokens[: depth * BLOCK_TOKENS]))
        own = [rng.getrandbits(64) for _ in range(per_replica - depth)]
        parent = shared_engine[depth - 1] if depth else None
        for i in range(0, len(own), EVENT_BATCH):
            batch = own[i : i + EVENT_BATCH]
            tokens = filler[: len(batch) * BLOCK_TOKENS]
            if i == 0:  # a first block of its own makes the replica's chain its own
                tokens = [rng.randrange(50_000) for _ in range(BLOCK_TOKENS)] + tokens[
                    BLOCK_TOKENS:
                ]
            events.append((batch, parent, tokens))
            parent = batch[-1]
        translator = EventTranslator(rid, timed)
        translators.append(translator)
        start = time.perf_counter()
        for engine_hashes, parent_hash, token_ids in events:
            translator.block_stored(engine_hashes, parent_hash, token_ids, BLOCK_TOKENS)
        ingest_s += time.perf_counter() - start
    maps = sum(t.nbytes for t in translators)
    return Fleet(
        prefill, decode, index, shared, ingest_s, timed.add_s, index.nbytes, maps,
        _rss() - before,
    )  # fmt: skip


def prompts(fleet: Fleet, n: int, rng: random.Random) -> list[RequestSummary]:
    """Prompts of PROMPT_BLOCKS blocks: the shared chain to a random depth, then new blocks."""
    out = []
    for i in range(n):
        depth = rng.randint(0, SHARED_BLOCKS)
        blocks = fleet.shared[:depth] + [rng.getrandbits(63) for _ in range(PROMPT_BLOCKS - depth)]
        out.append(
            RequestSummary(
                request_id=f"r{i}",
                num_prompt_tokens=PROMPT_BLOCKS * BLOCK_TOKENS + rng.randrange(BLOCK_TOKENS),
                block_hashes=tuple(blocks),
                client_priority=0,
                arrival_time_s=0.0,
            )
        )
    return out


def time_decisions(
    policy: RoutingPolicy,
    fleet: Fleet,
    requests: Sequence[RequestSummary],
    in_flight: int,
) -> list[float]:
    """Process CPU seconds of each `decide` call (garbage collection off while timing), as
    a loaded router sees it: each decision's prefill and decode stream stay open until
    `in_flight` later decisions were made (the router's in-flight work and open streams, which
    a decision reads, span that many replicas)."""
    work = OutstandingWork()
    streams = OpenStreams()
    open_: deque[tuple[str, str, str]] = deque()
    times = []
    gc.disable()
    try:
        for request in requests:
            start = time.process_time_ns()
            d = policy.decide(
                request, fleet.prefill, fleet.decode, fleet.index, work, 0.0,
                open_streams=streams,
            )  # fmt: skip
            times.append((time.process_time_ns() - start) / 1e9)
            prefilling = d.prefill_replica_id or d.decode_replica_id
            work.start(prefilling, request.request_id, d.est_prefill_s, d.engine_priority, 0.0)
            streams.add(d.decode_replica_id, 1)
            open_.append((prefilling, request.request_id, d.decode_replica_id))
            if len(open_) > in_flight:
                rid, req, dec = open_.popleft()
                work.finish(rid, req)
                streams.add(dec, -1)
    finally:
        gc.enable()
    return times


def _p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def measure(replicas_per_pool: int, entries: int, num_decisions: int, seed: int = 0) -> FleetRow:
    rng = random.Random(seed)
    fleet = build_fleet(replicas_per_pool, entries, rng)
    from pdserve.router.policy.config import PolicyConfig

    policy = RoutingPolicy(PolicyConfig(block_size_tokens=BLOCK_TOKENS))
    requests = prompts(fleet, num_decisions, rng)
    in_flight = 2 * replicas_per_pool
    time_decisions(policy, fleet, requests[: min(20, len(requests))], in_flight)  # warm-up
    times = time_decisions(policy, fleet, requests, in_flight)
    total = len(fleet.prefill + fleet.decode) * max(1, entries // (2 * replicas_per_pool))
    return FleetRow(
        replicas_per_pool=replicas_per_pool,
        entries=total,
        decision_p50_us=statistics.median(times) * 1e6,
        decision_p99_us=_p99(times) * 1e6,
        index_bytes_per_million=fleet.index_bytes / (total / 1e6),
        translator_bytes_per_million=fleet.translator_bytes / (total / 1e6),
        ingest_events_per_s=total / fleet.ingest_s if fleet.ingest_s > 0 else float("inf"),
        index_ingest_events_per_s=(
            total / fleet.index_ingest_s if fleet.index_ingest_s > 0 else float("inf")
        ),
        rss_growth_bytes_per_million=fleet.rss_bytes / (total / 1e6),
    )


def render(rows: Sequence[FleetRow]) -> Table:
    """The rows, each with its decision times as a ratio to the smallest fleet of the same
    index size in this run."""
    table = Table(
        title="routing decision at fleet size (process CPU time per decision; ÷ min: ratio to "
        "the smallest fleet of the same index size; index / maps MB / M: the prefix index's and "
        "the KV-event translators' arrays per million (replica, block) entries; M events/s: "
        "block events through translator and index; index M/s: the index's share alone)"
    )
    for column in (
        "per pool", "entries", "p50 µs", "p99 µs", "p50 ÷ min", "p99 ÷ min",
        "index MB / M", "maps MB / M", "M events/s", "index M/s",
    ):  # fmt: skip
        table.add_column(column, justify="right")
    smallest: dict[int, FleetRow] = {}
    for row in sorted(rows, key=lambda r: r.replicas_per_pool):
        smallest.setdefault(round(row.entries, -5), row)
    for row in rows:
        base = smallest[round(row.entries, -5)]
        table.add_row(
            str(row.replicas_per_pool),
            f"{row.entries / 1e6:.1f} M",
            f"{row.decision_p50_us:,.0f}",
            f"{row.decision_p99_us:,.0f}",
            f"{row.decision_p50_us / base.decision_p50_us:.2f}",
            f"{row.decision_p99_us / base.decision_p99_us:.2f}",
            f"{row.index_bytes_per_million / 1e6:.1f}",
            f"{row.translator_bytes_per_million / 1e6:.1f}",
            f"{row.ingest_events_per_s / 1e6:.2f}",
            f"{row.index_ingest_events_per_s / 1e6:.2f}",
        )
    return table
