"""Small builders for the policy's frozen data, with neutral defaults."""

from __future__ import annotations

from pdserve.names import PoolName
from pdserve.router.policy import Candidate, CostModel, ReplicaSnapshot, RequestSummary

BLOCK = 128
ROUND_COST = CostModel(
    fixed_overhead_s=0.01,
    per_token_s=1e-4,
    per_token_sq_s=0.0,
    kv_transfer_per_token_s=2e-5,
    decode_base_s=0.005,
    decode_per_seq_s=0.001,
    decode_per_context_token_s=0.0,
)
"""Round numbers: 10 ms per prompt plus 0.1 ms a prompt token, 20 us of transfer a token; a
decode step of b streams 5 ms + 1 ms x b."""


def hashes(n: int, *, seed: int = 0) -> tuple[int, ...]:
    """n distinct block hashes; different seeds give disjoint chains."""
    return tuple(seed * 1_000_000 + i for i in range(n))


def req(
    num_prompt_tokens: int = 4096,
    block_hashes: tuple[int, ...] | None = None,
    *,
    client_priority: int = 0,
    request_id: str = "r",
) -> RequestSummary:
    if block_hashes is None:
        block_hashes = hashes(num_prompt_tokens // BLOCK)
    return RequestSummary(request_id, num_prompt_tokens, block_hashes, client_priority, 0.0)


def snap(
    replica_id: str,
    pool: PoolName = "prefill",
    *,
    running: int = 0,
    waiting: int = 0,
    kv: float = 0.0,
    queued: int = 0,
    healthy: bool = True,
    queued_prefills: int = 0,
) -> ReplicaSnapshot:
    return ReplicaSnapshot(
        replica_id, pool, running, waiting, kv, queued, healthy, num_queued_prefills=queued_prefills
    )


def cand(
    replica_id: str,
    *,
    cached: int = 0,
    est: float = 0.1,
    outstanding: float = 0.0,
    running: int = 0,
    waiting: int = 0,
    kv: float = 0.0,
    healthy: bool = True,
) -> Candidate:
    s = snap(replica_id, running=running, waiting=waiting, kv=kv, healthy=healthy)
    return Candidate(s, cached, est, outstanding)
