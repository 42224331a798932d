"""Plain frozen data the routing policy reads and returns. No behaviour beyond validation.

The router builds a `RequestSummary` once per request (after tokenizing) and keeps a
`ReplicaSnapshot` per replica, refreshed from the replicas' routing stats. The policy turns
them into `Candidate`s (a replica evaluated for one request) and returns one `Decision`.
The pool and policy names (`PoolName`, `POOLS`, `PolicyName`) live in `pdserve.names`, shared by
every layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pdserve.names import POOLS, PolicyName, PoolName
from pdserve.router.policy.itl_guard import ItlCost, ItlVerdictCode


class NoReplicaError(RuntimeError):
    """A pool the request needs has no healthy replica; the request cannot be served now.

    `pool` says which one ("prefill" or "decode"). The router answers 503 with this message.
    """

    def __init__(self, pool: PoolName, detail: str = "") -> None:
        self.pool = pool
        msg = f"no healthy {pool} replica is available"
        super().__init__(f"{msg}: {detail}" if detail else msg)


@dataclass(frozen=True, slots=True)
class RequestSummary:
    """What the policy knows about one request. Built by the router once per request.

    `block_hashes` are the router's chained hashes of the prompt's FULL blocks
    (`block_size_tokens` tokens each), first block first: hash i covers tokens
    [0, (i + 1) * block_size_tokens), so a hash match implies the whole prefix matches.
    `client_priority` is the client's own priority (vLLM convention: lower is served first),
    added as an offset to the engine priority. `arrival_time_s` uses the router's clock.
    """

    request_id: str
    num_prompt_tokens: int
    block_hashes: tuple[int, ...]
    client_priority: int
    arrival_time_s: float

    def __post_init__(self) -> None:
        if self.num_prompt_tokens < 0:
            raise ValueError(
                f"request {self.request_id}: num_prompt_tokens must be >= 0, "
                f"got {self.num_prompt_tokens}"
            )


@dataclass(frozen=True, slots=True)
class ReplicaSnapshot:
    """One replica's load as last reported (the router refreshes it; it may be slightly stale).

    `queued_prefill_tokens` / `num_queued_prefills`: uncached prompt tokens (and prompts)
    the engine has accepted and not finished prefilling, from every router (the engine's own
    count, pdserve.engine.pending). `kv_cache_usage` is the fraction of KV blocks in use.
    `healthy=False` (its engine is dead or unresponsive, or it never reported) takes the
    replica out of routing; the router's view also forgets its cached blocks.
    """

    replica_id: str
    pool: PoolName
    num_running_requests: int
    num_waiting_requests: int
    kv_cache_usage: float
    queued_prefill_tokens: int
    healthy: bool = True
    num_queued_prefills: int = 0
    kv_transfer_failures_total: int = 0
    """KV transfers the engine reported failed since it started (cumulative)."""
    kv_expired_total: int = 0
    """Requests whose KV the engine freed at the end of its lease, unpulled (cumulative)."""

    def __post_init__(self) -> None:
        if self.pool not in POOLS:
            raise ValueError(
                f"replica {self.replica_id}: pool must be 'prefill' or 'decode', got {self.pool!r}"
            )
        if not 0.0 <= self.kv_cache_usage <= 1.0:
            raise ValueError(
                f"replica {self.replica_id}: kv_cache_usage must be in [0, 1], "
                f"got {self.kv_cache_usage}"
            )
        if (
            min(self.num_running_requests, self.num_waiting_requests, self.queued_prefill_tokens)
            < 0
        ):
            raise ValueError(f"replica {self.replica_id}: request/token counts must be >= 0")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A replica evaluated for one request (built by the pipeline, read by plugins).

    `num_cached_tokens`: prompt tokens whose KV this replica already holds (longest cached
    prefix). `est_prefill_s`: estimated seconds to prefill this request there, given that
    cache. `outstanding_prefill_s`: estimated seconds of prefill work already queued there
    (not counting this request). `transfer_s`: what the remote option adds from there: the
    remote path's fixed cost and moving this request's KV to decode
    (`CostModel.est_remote_extra_s`; 0 for a decode replica prefilling locally).
    """

    replica: ReplicaSnapshot
    num_cached_tokens: int
    est_prefill_s: float
    outstanding_prefill_s: float
    num_long_in_flight: int = 0
    """Long prefills (estimated >= the lane threshold) this router has in flight there."""
    transfer_s: float = 0.0

    @property
    def replica_id(self) -> str:
        return self.replica.replica_id

    @property
    def predicted_ttft_s(self) -> float:
        """Predicted time to first token if this replica prefills: wait for its queued prefill
        work + this prompt's uncached prefill there (its cache enters here) + the KV transfer."""
        return self.outstanding_prefill_s + self.est_prefill_s + self.transfer_s


@dataclass(frozen=True, slots=True)
class Decision:
    """Where one request runs and at what engine priority. Returned by `RoutingPolicy.decide`.

    `prefill_replica_id` None means: no remote prefill, the decode replica prefills locally
    (it holds almost the whole prompt already). `engine_priority` follows vLLM's priority
    scheduling: lower is served first. `est_prefill_s` and `num_cached_tokens` are for the
    replica that prefills (the prefill replica, or the decode replica when local);
    `num_cached_tokens_decode` is always the decode replica's. `reason` is a short human
    string for logs and the request timeline; `scores` maps replica id → scorer name → value
    (plus "total"), the inputs of the choice for the chosen and the best few replicas of each
    pool (plugins.SCORE_TABLE_ROWS), for debugging. `policy` is the policy that
    decided (after any per-request override).
    """

    prefill_replica_id: str | None
    decode_replica_id: str
    engine_priority: int
    est_prefill_s: float
    num_cached_tokens: int
    num_cached_tokens_decode: int
    reason: str
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    policy: PolicyName = "pdserve"
    predicted_ttft_s: dict[str, float] = field(default_factory=dict)
    """Predicted seconds to first token of the options weighed: `local:<decode replica id>`
    for prefilling on decode, and prefill replica ids — the chosen one and the few fastest
    (pdserve policy only; the whole pool would cost more than the decision at fleet size)."""
    predicted_wait_s: float = 0.0
    """Predicted seconds this request waits for queued prefill work where it prefills (what
    admission control's prefill-backlog bound checks)."""
    itl: ItlVerdictCode | None = None
    """The ITL guard's verdict when it weighed prefilling on the decode replica (pdserve
    policy, itl_slo_s set, streams decoding there): `worth` (prefilled there), `not_worth` or
    `no_headroom` (sent to the prefill pool); None when it did not weigh one."""
    itl_cost: ItlCost | None = None
    """The guard's prediction behind `itl`: ITL budget, predicted step, streams, chunk."""

    @property
    def prefill_is_local(self) -> bool:
        """True when the decode replica prefills the request itself (no KV transfer)."""
        return self.prefill_replica_id is None
