"""The baselines' decisions (pure): round_robin and least_loaded always prefill remotely (on
the decode pick when aggregated) at the client's priority. RoutingPolicy picks the replicas;
this module evaluates them and states the decision."""

from __future__ import annotations

from pdserve.names import PolicyName, PoolName
from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.cost_model import CostModel
from pdserve.router.policy.load import replica_load
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.policy.state import OutstandingWork
from pdserve.router.policy.types import Candidate, Decision, ReplicaSnapshot, RequestSummary


def baseline_candidate(
    pool: PoolName,
    request: RequestSummary,
    snap: ReplicaSnapshot,
    index: PrefixIndex,
    work: OutstandingWork,
    cost: CostModel,
    block_size_tokens: int,
    config: PolicyConfig,
) -> Candidate:
    """Evaluate one replica (the baselines' pick): cached prefix, own prefill estimate,
    queued prefill seconds (as `candidate_columns` computes them). Raises ValueError when
    `snap` is not a replica of `pool`."""
    if snap.pool != pool:
        raise ValueError(f"replica {snap.replica_id} is a {snap.pool} replica, passed as {pool}")
    n = request.num_prompt_tokens
    rid = snap.replica_id
    cached = min(index.num_cached_blocks(rid, request.block_hashes) * block_size_tokens, n)
    return Candidate(
        snap,
        cached,
        cost.est_prefill_s(n - cached, cached),
        max(
            work.outstanding_s(rid),
            cost.est_backlog_s(snap.queued_prefill_tokens, snap.num_queued_prefills),
        ),
        work.num_long_in_flight(rid, config.lane_long_prefill_s),
        cost.est_remote_extra_s(n) if pool == "prefill" else 0,
    )


def baseline_decision(
    name: PolicyName, request: RequestSummary, p: Candidate, d: Candidate, reason: str
) -> Decision:
    """Prefill on `p`, decode on `d`; `reason` is formatted with {p}, {d} (replica ids) and
    {pl}, {dl} (their running + waiting requests)."""
    pl, dl = replica_load(p.replica), replica_load(d.replica)
    return Decision(
        prefill_replica_id=p.replica_id,
        decode_replica_id=d.replica_id,
        engine_priority=request.client_priority,
        est_prefill_s=p.est_prefill_s,
        num_cached_tokens=p.num_cached_tokens,
        num_cached_tokens_decode=d.num_cached_tokens,
        reason=reason.format(p=p.replica_id, d=d.replica_id, pl=pl, dl=dl),
        scores={p.replica_id: {"load": float(pl)}, d.replica_id: {"load": float(dl)}},
        policy=name,
        predicted_ttft_s={p.replica_id: p.predicted_ttft_s},
        predicted_wait_s=p.outstanding_prefill_s,
    )


def aggregated_baseline_decision(
    name: PolicyName, request: RequestSummary, d: Candidate
) -> Decision:
    """Without a prefill pool: the decode pick `d` prefills."""
    load = replica_load(d.replica)
    return Decision(
        prefill_replica_id=None,
        decode_replica_id=d.replica_id,
        engine_priority=request.client_priority,
        est_prefill_s=d.est_prefill_s,
        num_cached_tokens=d.num_cached_tokens,
        num_cached_tokens_decode=d.num_cached_tokens,
        reason=f"{name} (aggregated): decode {d.replica_id} ({load} requests)",
        scores={d.replica_id: {"load": float(load)}},
        policy=name,
        predicted_ttft_s={f"local:{d.replica_id}": d.predicted_ttft_s},
        predicted_wait_s=d.outstanding_prefill_s,
    )
