"""Typed messages between the router and the engine servers (sent over Ray Serve handles).

Plain frozen dataclasses: cheap to pickle, no string-keyed dicts across the boundary. The
requests and their answers come first (router → engine → router); then what an engine reports
about itself: `EngineStats` (its load and cumulative counters) and `BucketCounts` (a histogram
it measures, with the shared bounds `SECONDS_BUCKETS` / `BYTES_BUCKETS`), which the engine
sends in its routing stats and the router sums per pool (router/engine_histograms.py). Both
sides import these from here, so neither imports the other.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from pdserve.kv_transfer.params import KVHandoff


@dataclass(frozen=True, slots=True)
class SamplingOptions:
    """OpenAI sampling parameters after validation, as the engine needs them."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_tokens: int = 0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    num_logprobs: int | None = None
    """None: no logprobs; k >= 0: the sampled token's logprob plus the top k."""


@dataclass(frozen=True, slots=True)
class EngineTimes:
    """One request's timestamps inside one engine (the engine's monotonic clock, seconds).

    Only differences between these three are meaningful off the engine's host.
    """

    queued_s: float
    """The request entered the engine's queue."""
    scheduled_s: float
    """The engine first scheduled it (for a decode with remote prefill: its KV had arrived)."""
    first_token_s: float
    """The engine produced its first token (prefill finished)."""


@dataclass(frozen=True, slots=True)
class PrefillRequest:
    """Router → prefill server: compute the prompt's KV and hold it for a decode pull."""

    request_id: str
    prompt_token_ids: list[int]
    priority: int = 0
    target_replica_id: str | None = None
    """The prefill replica the router's policy chose (None: Ray Serve places by load)."""
    expected_cached_tokens: int = 0
    """Prompt tokens the router expects the engine's prefix cache to hold (its pending-prefill
    count leaves them out)."""
    verify_kv: bool = False
    """Put an integrity record (identity, lease end, block digests) into the handoff."""


@dataclass(frozen=True, slots=True)
class PrefillResult:
    """Prefill server → router: where the KV is, and what the prefill took from its cache."""

    handoff: KVHandoff
    num_prompt_tokens: int
    num_cached_tokens: int
    """Prompt tokens the prefill engine found in its prefix cache instead of computing."""
    engine_times: EngineTimes | None = None
    replica_id: str = ""
    """The prefill replica that served it (proof that placement was enforced)."""
    request_id: str = ""
    """The prefill request's id (a decode engine checks the handoff belongs to it)."""


@dataclass(frozen=True, slots=True)
class DecodeRequest:
    """Router → decode server: generate, pulling the prompt's KV first when `handoff` is set.

    `handoff` None means a local prefill on the decode engine.
    """

    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingOptions
    handoff: KVHandoff | None = None
    priority: int = 0
    target_replica_id: str | None = None
    """The decode replica the router's policy chose (None: Ray Serve places by load)."""
    expected_cached_tokens: int = 0
    """Local prefill: prompt tokens the router expects this engine's prefix cache to hold."""
    batch_interval_s: float = 0.0
    """Send tokens at most once per this many seconds (first token and finish at once);
    0 = every engine step, inf = first token and the rest at the end (non-streaming)."""
    verify_kv: bool = False
    """Check the handoff before decoding from it (docs/kv-integrity.md)."""
    prefill_request_id: str | None = None
    """The id the router gave the prefill request that made `handoff` (its identity check)."""


@dataclass(frozen=True, slots=True)
class KVRelease:
    """Router → decode server: a handoff that will never be decoded (its decode did not reach
    an engine: cancelled, timed out, replica gone). The decode engine tells the prefill
    engine to free that KV now instead of at the end of its lease."""

    request_id: str
    handoff: KVHandoff


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token's logprob and its top alternatives."""

    token: str
    token_id: int
    logprob: float
    top: list[tuple[str, int, float]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DecodeChunk:
    """Decode server → router, streamed: new text since the previous chunk.

    One chunk may carry several tokens (the engine merges deltas when the router lags), which
    keeps per-token Ray round trips off the hot path. The last chunk has `finish_reason` set.
    """

    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    """Prompt tokens the serving prefill (remote or local) took from a prefix cache."""
    engine_times: EngineTimes | None = None
    """Set on the first chunk only: the decode engine's times for this request."""
    replica_id: str = ""
    """Set on the first chunk only: the decode replica that served it."""
    kv_recomputed: str | None = None
    """Set on the first chunk that knows it: why the decode engine recomputed the prompt
    instead of using its KV handoff (digest, identity, stale, unverifiable)."""


@dataclass(frozen=True, slots=True)
class EngineStats:
    """A point-in-time view of one engine; counters are cumulative since engine start.

    Built by the engine's counters (pdserve.engine.stats) on demand; returned by a pool
    replica's `stats()` (tests and operators read it through a handle) and read by the engine
    server for its routing stats.
    """

    num_running_requests: int
    num_waiting_requests: int
    kv_cache_usage: float
    prompt_tokens_computed_total: int
    """Prompt tokens this engine computed itself."""
    prompt_tokens_local_cache_hit_total: int
    """Prompt tokens taken from this engine's own prefix cache."""
    prompt_tokens_kv_transfer_total: int
    """Prompt tokens whose KV arrived over NIXL from another engine."""
    generation_tokens_total: int
    """Output tokens this engine generated (an aborted request counts those made before it)."""
    num_kv_transfers_total: int
    num_kv_transfer_failures_total: int
    """NIXL transfer, handshake and notification failures this engine saw."""
    num_kv_expired_total: int
    """Requests whose KV this (prefill) engine freed at the end of its lease, unpulled."""
    kv_transfer_bytes_total: int
    kv_transfer_seconds_total: float


# Histogram bounds, shared by the router's own histograms and those the engines measure (a
# report is summed only into a family with the same bounds). Seconds: 1 ms to 2 minutes;
# bytes: 4 KiB to 4 GiB.
SECONDS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0,
)  # fmt: skip
BYTES_BUCKETS = tuple(float(4096 * 4**i) for i in range(11))


@dataclass
class BucketCounts:
    """Observations per bucket (`counts[i]`: values <= bounds[i] and > bounds[i-1]; the last
    counts the values above every bound) and their sum. Not thread-safe.

    An engine keeps one per measured histogram, cumulative since it started, and sends
    `report()` in its routing stats; the router keeps per-pool totals in the same type.
    """

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    sum: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, times: int = 1) -> None:
        """Count `value` `times` times (a step's seconds once per stream that waited on it)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times

    def report(self) -> dict[str, Any]:
        """JSON-able form for the routing stats: `{"counts": [...], "sum": float}`."""
        return {"counts": list(self.counts), "sum": self.sum}
