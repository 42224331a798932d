"""`RoutingPolicy.decide`: one request + replica snapshots → one `Decision`.

Called by the router once per request on its hot path, after tokenizing and hashing the
prompt's blocks; pure except for the round-robin counters it owns. The router then calls
`OutstandingWork.start` for the replica that prefills and `PrefixIndex.on_routed`, sends the
prefill (remote, or local on the decode replica), and calls `OutstandingWork.finish` when the
prefill ends. Cost: O(replicas x cached prefix blocks) index lookups plus O(replicas) scoring
(each scorer rates a whole pool at once; `pdserve bench-router` measures it at fleet size).

pdserve's flow: decode pool (filters → scorers → picker) → decider (local or remote
prefill) → if remote, prefill pool (filters, then the lane filter when `lanes` is on →
scorers → picker) → priority (cost bucket + client offset, aged). Decode is chosen first
because a decode replica that already holds the prompt can skip the prefill pool and the KV
transfer entirely. In an aggregated deployment (`aggregated=True`: no prefill pool) every
policy stops after the decode pick: the chosen replica prefills the prompt itself.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence

from pdserve.names import PolicyName, PoolName
from pdserve.router.policy.config import PolicyConfig, ScorerWeights
from pdserve.router.policy.plugins import (
    SCORE_TABLE_ROWS,
    Filter,
    HealthyFilter,
    KVCapacityFilter,
    KVUsageScorer,
    LaneFilter,
    LocalPrefillDecider,
    MaxScorePicker,
    OutstandingPrefillScorer,
    PredictedTTFTScorer,
    PrefixOverlapScorer,
    PriorityAssigner,
    RunningRequestsScorer,
    Scorer,
    WeightedScorer,
)
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.policy.state import OutstandingWork
from pdserve.router.policy.types import (
    Candidate,
    Decision,
    NoReplicaError,
    ReplicaSnapshot,
    RequestSummary,
)

__all__ = ["NoReplicaError", "PolicyConfig", "RoutingPolicy", "build_scorers"]


def build_scorers(weights: ScorerWeights) -> tuple[WeightedScorer, ...]:
    """The scorers with a weight > 0, in a fixed order. Add a new scorer here and as a field
    of ScorerWeights named like its `name`."""
    scorers: tuple[Scorer, ...] = (
        PredictedTTFTScorer(),
        PrefixOverlapScorer(),
        OutstandingPrefillScorer(),
        RunningRequestsScorer(),
        KVUsageScorer(),
    )
    table = weights.model_dump()
    return tuple(WeightedScorer(s, table[s.name]) for s in scorers if table[s.name] > 0)


class RoutingPolicy:
    """Builds the plugin pipeline from a PolicyConfig once; `decide` runs it per request.

    `policy` is the policy that decides when a request names none (the deployment's
    `router.policy`). Owns only the round-robin counters (one per pool). The prefix index and
    outstanding work are passed in, so one router can share them across policies (the
    per-request override). `rng`, if given, breaks score ties randomly instead of by lowest
    replica id. `aggregated`: the deployment has no prefill pool; every decision is a local
    prefill on the decode replica the policy picks (pdserve: decode filters and scorers, so
    prefix overlap still steers a prompt to where its prefix is cached).
    """

    def __init__(
        self,
        config: PolicyConfig | None = None,
        *,
        policy: PolicyName = "pdserve",
        rng: random.Random | None = None,
        aggregated: bool = False,
    ):
        self.config = config if config is not None else PolicyConfig()
        self.aggregated = aggregated
        self.policy: PolicyName = policy
        cfg = self.config
        self._cost = cfg.cost_model
        self._block_size = cfg.block_size_tokens
        self._filters: tuple[Filter, ...] = (
            HealthyFilter(),
            KVCapacityFilter(cfg.max_kv_cache_usage),
        )
        self._lane = (
            LaneFilter(cfg.lane_long_prefill_s, cfg.lane_max_long_backlog_s) if cfg.lanes else None
        )
        self._prefill_scorers = build_scorers(cfg.prefill_weights)
        self._decode_scorers = build_scorers(cfg.decode_weights)
        self._picker = MaxScorePicker(rng)
        self._decider = LocalPrefillDecider(
            cfg.local_prefill_max_uncached_tokens, cfg.local_prefill_max_cold_tokens
        )
        self._priority = PriorityAssigner(cfg.priority_bucket_base_s, cfg.max_priority_levels)
        self._rr_next: dict[PoolName, int] = {"prefill": 0, "decode": 0}

    def decide(
        self,
        request: RequestSummary,
        prefill: Sequence[ReplicaSnapshot],
        decode: Sequence[ReplicaSnapshot],
        index: PrefixIndex,
        work: OutstandingWork,
        now_s: float,
        policy: PolicyName | None = None,
    ) -> Decision:
        """Choose the prefill replica (None = prefill locally on decode), the decode replica
        and the engine priority for `request`.

        `prefill` / `decode`: the latest snapshots of each pool (unhealthy ones are skipped;
        replica ids must be unique across both pools). `policy` overrides `self.policy`
        for this request. Raises NoReplicaError when a needed pool has no healthy
        replica, ValueError for an unknown policy or block hashes longer than the prompt.
        """
        name = self.policy if policy is None else policy
        if len(request.block_hashes) * self._block_size > request.num_prompt_tokens:
            raise ValueError(
                f"request {request.request_id}: {len(request.block_hashes)} full blocks of "
                f"{self._block_size} tokens exceed its {request.num_prompt_tokens} prompt tokens; "
                "hash with the policy's block_size_tokens"
            )
        if name == "pdserve":
            return self._pdserve(request, prefill, decode, index, work, now_s)
        if self.aggregated:
            return self._aggregated_baseline(name, request, decode, index, work)
        if name == "round_robin":
            p, d = self._round_robin("prefill", prefill), self._round_robin("decode", decode)
            return self._baseline(
                name, request, p, d, index, work, "round_robin: prefill {p}, decode {d}"
            )
        if name == "least_loaded":
            p, d = _least_loaded("prefill", prefill), _least_loaded("decode", decode)
            return self._baseline(
                name,
                request,
                p,
                d,
                index,
                work,
                "least_loaded: prefill {p} ({pl} requests), decode {d} ({dl})",
            )
        raise ValueError(f"unknown routing policy {name!r}: use pdserve, round_robin, least_loaded")

    # ---- pdserve ----

    def _pdserve(
        self,
        request: RequestSummary,
        prefill: Sequence[ReplicaSnapshot],
        decode: Sequence[ReplicaSnapshot],
        index: PrefixIndex,
        work: OutstandingWork,
        now_s: float,
    ) -> Decision:
        d_pick = self._picker.pick(
            request,
            self._filtered("decode", request, decode, index, work),
            self._decode_scorers,
        )
        d = d_pick.candidate
        scores = d_pick.scores
        local = f"local:{d.replica_id}"
        predicted = {local: d.predicted_ttft_s}
        if self.aggregated:
            aggregated = (
                f"aggregated: decode {d.replica_id} prefills "
                f"{request.num_prompt_tokens - d.num_cached_tokens} uncached tokens, "
                f"predicted TTFT {d.predicted_ttft_s:.3f} s"
            )
            return self._decision(request, None, d, d, work, now_s, aggregated, scores, predicted)
        reason = self._decider.reason(request, d)
        if reason is not None:
            return self._decision(request, None, d, d, work, now_s, reason, scores, predicted)
        prefill_candidates = self._filtered("prefill", request, prefill, index, work)
        p_pick = self._picker.pick(request, prefill_candidates, self._prefill_scorers)
        p = p_pick.candidate
        scores.update(p_pick.scores)
        fastest = (
            prefill_candidates
            if len(prefill_candidates) <= SCORE_TABLE_ROWS
            else heapq.nsmallest(
                SCORE_TABLE_ROWS, prefill_candidates, key=lambda c: c.predicted_ttft_s
            )
        )
        predicted.update((c.replica_id, c.predicted_ttft_s) for c in (p, *fastest))
        cfg = self.config
        gain_s = p.predicted_ttft_s - d.predicted_ttft_s
        if gain_s >= cfg.spill_min_gain_s and d.predicted_ttft_s <= cfg.spill_max_decode_prefill_s:
            reason = (
                f"spill: local on decode {d.replica_id} predicted {d.predicted_ttft_s:.3f} s, "
                f"remote on {p.replica_id} {p.predicted_ttft_s:.3f} s"
            )
            return self._decision(request, None, d, d, work, now_s, reason, scores, predicted)
        reason = (
            f"remote: prefill {p.replica_id} has {p.num_cached_tokens // self._block_size}/"
            f"{len(request.block_hashes)} blocks, predicted TTFT {p.predicted_ttft_s:.3f} s; "
            f"decode {d.replica_id}"
        )
        return self._decision(request, p.replica_id, p, d, work, now_s, reason, scores, predicted)

    def _decision(
        self,
        request: RequestSummary,
        prefill_replica_id: str | None,
        prefilling: Candidate,
        d: Candidate,
        work: OutstandingWork,
        now_s: float,
        reason: str,
        scores: dict[str, dict[str, float]],
        predicted: dict[str, float],
    ) -> Decision:
        """The pdserve decision; `prefilling` is the candidate that computes the prompt (the
        prefill replica, or the decode replica itself for a local prefill)."""
        starving = work.starving_priority(prefilling.replica_id, now_s, self.config.aging_s)
        return Decision(
            prefill_replica_id=prefill_replica_id,
            decode_replica_id=d.replica_id,
            engine_priority=self._priority.assign(request, prefilling.est_prefill_s, starving),
            est_prefill_s=prefilling.est_prefill_s,
            num_cached_tokens=prefilling.num_cached_tokens,
            num_cached_tokens_decode=d.num_cached_tokens,
            reason=reason,
            scores=scores,
            policy="pdserve",
            predicted_ttft_s=predicted,
            predicted_wait_s=prefilling.outstanding_prefill_s,
        )

    def _filtered(
        self,
        pool: PoolName,
        request: RequestSummary,
        snapshots: Sequence[ReplicaSnapshot],
        index: PrefixIndex,
        work: OutstandingWork,
    ) -> list[Candidate]:
        candidates = self._candidates(pool, request, snapshots, index, work)
        for f in self._filters:
            candidates = f.filter(request, candidates)
        if pool == "prefill" and self._lane is not None:
            candidates = self._lane.filter(request, candidates)
        if not candidates:
            raise NoReplicaError(pool, f"{len(snapshots)} known, none healthy")
        return candidates

    def _candidates(
        self,
        pool: PoolName,
        request: RequestSummary,
        snapshots: Sequence[ReplicaSnapshot],
        index: PrefixIndex,
        work: OutstandingWork,
    ) -> list[Candidate]:
        """`_candidate` for every snapshot of a pool, with the request's own terms computed
        once (the prompt's cost for each cached length seen, its transfer): the hot loop of a
        decision at fleet size."""
        cost = self._cost
        num_prompt = request.num_prompt_tokens
        hashes = request.block_hashes
        block = self._block_size
        lane_s = self.config.lane_long_prefill_s
        transfer_s = cost.est_transfer_s(num_prompt) if pool == "prefill" else 0
        est_by_cached: dict[int, float] = {}
        cached_blocks = index.num_cached_blocks
        backlog_s = cost.est_backlog_s
        out = []
        for snap in snapshots:
            if snap.pool != pool:
                raise ValueError(
                    f"replica {snap.replica_id} is a {snap.pool} replica, passed as {pool}"
                )
            rid = snap.replica_id
            cached = min(cached_blocks(rid, hashes) * block, num_prompt)
            est = est_by_cached.get(cached)
            if est is None:
                est = est_by_cached[cached] = cost.est_prefill_s(num_prompt - cached, cached)
            out.append(
                Candidate(
                    snap,
                    cached,
                    est,
                    max(
                        work.outstanding_s(rid),
                        backlog_s(snap.queued_prefill_tokens, snap.num_queued_prefills),
                    ),
                    work.num_long_in_flight(rid, lane_s),
                    transfer_s,
                )
            )
        return out

    def _candidate(
        self,
        pool: PoolName,
        request: RequestSummary,
        snap: ReplicaSnapshot,
        index: PrefixIndex,
        work: OutstandingWork,
    ) -> Candidate:
        """Evaluate one replica: cached prefix, own prefill estimate, queued prefill seconds.
        Queued = max(this router's in-flight estimates, the engine's reported queue costed by
        the cost model): the first is fresher, the second also sees other routers' work."""
        return self._candidates(pool, request, (snap,), index, work)[0]

    # ---- baselines: always remote prefill, priority = client priority ----

    def _round_robin(self, pool: PoolName, snapshots: Sequence[ReplicaSnapshot]) -> ReplicaSnapshot:
        """Next healthy replica (sorted by id) for this pool; one counter per pool."""
        healthy = sorted((s for s in snapshots if s.healthy), key=lambda s: s.replica_id)
        if not healthy:
            raise NoReplicaError(pool, f"{len(snapshots)} known, none healthy")
        i = self._rr_next[pool]
        self._rr_next[pool] = i + 1
        return healthy[i % len(healthy)]

    def _baseline(
        self,
        name: PolicyName,
        request: RequestSummary,
        p_snap: ReplicaSnapshot,
        d_snap: ReplicaSnapshot,
        index: PrefixIndex,
        work: OutstandingWork,
        reason: str,
    ) -> Decision:
        p = self._candidate("prefill", request, p_snap, index, work)
        d = self._candidate("decode", request, d_snap, index, work)
        return Decision(
            prefill_replica_id=p.replica_id,
            decode_replica_id=d.replica_id,
            engine_priority=request.client_priority,
            est_prefill_s=p.est_prefill_s,
            num_cached_tokens=p.num_cached_tokens,
            num_cached_tokens_decode=d.num_cached_tokens,
            reason=reason.format(
                p=p.replica_id, d=d.replica_id, pl=_load(p_snap), dl=_load(d_snap)
            ),
            scores={
                p.replica_id: {"load": float(_load(p_snap))},
                d.replica_id: {"load": float(_load(d_snap))},
            },
            policy=name,
            predicted_ttft_s={p.replica_id: p.predicted_ttft_s},
            predicted_wait_s=p.outstanding_prefill_s,
        )

    def _aggregated_baseline(
        self,
        name: PolicyName,
        request: RequestSummary,
        decode: Sequence[ReplicaSnapshot],
        index: PrefixIndex,
        work: OutstandingWork,
    ) -> Decision:
        """round_robin / least_loaded without a prefill pool: the decode pick prefills."""
        if name == "round_robin":
            snap = self._round_robin("decode", decode)
        elif name == "least_loaded":
            snap = _least_loaded("decode", decode)
        else:
            raise ValueError(
                f"unknown routing policy {name!r}: use pdserve, round_robin, least_loaded"
            )
        d = self._candidate("decode", request, snap, index, work)
        return Decision(
            prefill_replica_id=None,
            decode_replica_id=d.replica_id,
            engine_priority=request.client_priority,
            est_prefill_s=d.est_prefill_s,
            num_cached_tokens=d.num_cached_tokens,
            num_cached_tokens_decode=d.num_cached_tokens,
            reason=f"{name} (aggregated): decode {d.replica_id} ({_load(snap)} requests)",
            scores={d.replica_id: {"load": float(_load(snap))}},
            policy=name,
            predicted_ttft_s={f"local:{d.replica_id}": d.predicted_ttft_s},
            predicted_wait_s=d.outstanding_prefill_s,
        )


def _load(s: ReplicaSnapshot) -> int:
    n: int = s.num_running_requests + s.num_waiting_requests
    return n


def _least_loaded(pool: PoolName, snapshots: Sequence[ReplicaSnapshot]) -> ReplicaSnapshot:
    """Fewest running + waiting requests among healthy replicas; ties by lowest replica id."""
    healthy = [s for s in snapshots if s.healthy]
    if not healthy:
        raise NoReplicaError(pool, f"{len(snapshots)} known, none healthy")
    return min(healthy, key=lambda s: (_load(s), s.replica_id))
