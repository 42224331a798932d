"""`RoutingPolicy.decide`: one request + replica snapshots → one `Decision`.

Called by the router once per request on its hot path, after tokenizing and hashing the
prompt's blocks; pure except for the round-robin counters it owns. The router then calls
`OutstandingWork.start` for the replica that prefills and `PrefixIndex.on_routed`, sends the
prefill (remote, or local on the decode replica), and calls `OutstandingWork.finish` when the
prefill ends. Cost (pdserve): one prefix-index pass for all replicas (`prefix_depths`), then
per pool one compiled kernel over the pool's arrays (pool_kernel.py, the compiled form of
plugins.py's filters, scorers and picker); tens of microseconds flat from 8 to 512 replicas
(`pdserve bench-router`, bench/RESULTS.md "Routing at fleet size").

pdserve's flow: decode pool (filters → scorers → picker) → decider (local or remote
prefill) → if remote, prefill pool (filters, then the lane filter when `lanes` is on →
scorers → picker) → priority (cost bucket + client offset, aged). Decode is chosen first
because a decode replica that already holds the prompt can skip the prefill pool and the KV
transfer entirely. In an aggregated deployment (`aggregated=True`: no prefill pool) every
policy stops after the decode pick: the chosen replica prefills the prompt itself.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pdserve.names import PolicyName, PoolName
from pdserve.router.policy import pool_kernel
from pdserve.router.policy.baselines import (
    aggregated_baseline_decision,
    baseline_candidate,
    baseline_decision,
)
from pdserve.router.policy.config import PolicyConfig, ScorerWeights
from pdserve.router.policy.itl_guard import ItlGuard, ItlVerdict
from pdserve.router.policy.load import least_loaded
from pdserve.router.policy.pace import PrefillPace
from pdserve.router.policy.plugins import (
    TIE_TOLERANCE,
    KVUsageScorer,
    LocalPrefillDecider,
    OutstandingPrefillScorer,
    PredictedTTFTScorer,
    PrefixOverlapScorer,
    PriorityAssigner,
    RunningRequestsScorer,
    Scorer,
    WeightedScorer,
)
from pdserve.router.policy.pool_arrays import PoolArrays
from pdserve.router.policy.pool_kernel import SCORER_ORDER
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.policy.state import OpenStreams, OutstandingWork
from pdserve.router.policy.types import (
    Candidate,
    Decision,
    NoReplicaError,
    ReplicaSnapshot,
    RequestSummary,
)

__all__ = ["NoReplicaError", "PolicyConfig", "RoutingPolicy", "build_scorers"]


@dataclass(frozen=True, slots=True)
class PoolPick:
    """One pool's pick: the candidate, the score table (plugins.Pick's) and the predicted
    TTFT of the pool's fastest few replicas."""

    candidate: Candidate
    scores: dict[str, dict[str, float]]
    fastest: dict[str, float]


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
        self._decider = LocalPrefillDecider(
            cfg.local_prefill_max_uncached_tokens, cfg.local_prefill_max_cold_tokens
        )
        self._itl = ItlGuard(
            cfg.cost_model,
            cfg.itl_slo_s,
            stall_weight=cfg.stall_weight,
            min_chunk_tokens=cfg.min_prefill_chunk_tokens,
        )
        self._priority = PriorityAssigner(cfg.priority_bucket_base_s, cfg.max_priority_levels)
        self.pace = PrefillPace(cfg.pace_weight)
        """Measured ÷ predicted prefill seconds per pool (`observe_prefill` feeds it)."""
        self._rr_next: dict[PoolName, int] = {"prefill": 0, "decode": 0}
        self._pool_arrays: dict[PoolName, PoolArrays] = {}
        # The kernel's inputs from the config (pool_kernel.evaluate's docstring).
        cost = cfg.cost_model
        self._cost_terms = np.array([cost.fixed_overhead_s, cost.per_token_s, cost.per_token_sq_s])
        self._lane_terms = np.array([1.0, cfg.lane_long_prefill_s, cfg.lane_max_long_backlog_s])
        self._no_lane = np.zeros(3)
        self._weights: dict[PoolName, np.ndarray] = {}
        self._scorer_columns: dict[PoolName, tuple[tuple[str, int], ...]] = {}
        pools: tuple[tuple[PoolName, ScorerWeights], ...] = (
            ("prefill", cfg.prefill_weights),
            ("decode", cfg.decode_weights),
        )
        for pool, weights in pools:
            table = weights.model_dump()
            self._weights[pool] = np.array([float(table[name]) for name in SCORER_ORDER])
            self._scorer_columns[pool] = tuple(
                (name, k) for k, name in enumerate(SCORER_ORDER) if table[name] > 0
            )
        self._rng = rng

    def decide(
        self,
        request: RequestSummary,
        prefill: Sequence[ReplicaSnapshot],
        decode: Sequence[ReplicaSnapshot],
        index: PrefixIndex,
        work: OutstandingWork,
        now_s: float,
        policy: PolicyName | None = None,
        open_streams: OpenStreams | None = None,
        itl_guard: bool | None = None,
        pace: bool | None = None,
    ) -> Decision:
        """Choose the prefill replica (None = prefill locally on decode), the decode replica
        and the engine priority for `request`.

        `prefill` / `decode`: the latest snapshots of each pool (unhealthy ones are skipped;
        replica ids must be unique across both pools). `policy` overrides `self.policy`
        for this request. Raises NoReplicaError when a needed pool has no healthy
        replica, ValueError for an unknown policy or block hashes longer than the prompt.
        `open_streams`: decode streams this router has open per decode replica (a replica
        counts at least that many requests: its stats lag); pdserve policy only.
        `itl_guard`: False skips the ITL guard for this request (None or True: it applies
        when the config sets itl_slo_s). `pace`: False compares local and remote with the
        cost model's predictions as they are (None or True: scaled by `self.pace` when the
        config sets pace_weight).

        Cost (pdserve): one prefix-index pass for every replica, then a few dozen numpy
        operations per pool; the pool arrays are rebuilt (O(replicas)) only when a new
        snapshot list is passed, so pass the same list objects until the view refreshes.
        """
        name = self.policy if policy is None else policy
        if len(request.block_hashes) * self._block_size > request.num_prompt_tokens:
            raise ValueError(
                f"request {request.request_id}: {len(request.block_hashes)} full blocks of "
                f"{self._block_size} tokens exceed its {request.num_prompt_tokens} prompt tokens; "
                "hash with the policy's block_size_tokens"
            )
        if name == "pdserve":
            return self._pdserve(
                request,
                prefill,
                decode,
                index,
                work,
                now_s,
                open_streams,
                itl_guard is not False,
                pace is not False,
            )
        if self.aggregated:
            return self._aggregated_baseline(name, request, decode, index, work)
        if name == "round_robin":
            p, d = self._round_robin("prefill", prefill), self._round_robin("decode", decode)
            return self._baseline(
                name, request, p, d, index, work, "round_robin: prefill {p}, decode {d}"
            )
        if name == "least_loaded":
            p, d = least_loaded("prefill", prefill), least_loaded("decode", decode)
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

    def observe_prefill(self, decision: Decision, measured_s: float) -> None:
        """A prefill this policy placed took `measured_s` on its engine (scheduled → first
        token): the measured pace of its pool (prefill, or decode for a local prefill) moves
        toward measured ÷ `decision.est_prefill_s`. Only pdserve's decisions count (the
        baselines' estimates are the same model's, but not what they were placed by)."""
        if decision.policy != "pdserve" or self.aggregated:
            return
        pool: PoolName = "decode" if decision.prefill_is_local else "prefill"
        self.pace.observe(pool, decision.est_prefill_s, measured_s)

    # ---- pdserve ----

    def _pdserve(
        self,
        request: RequestSummary,
        prefill: Sequence[ReplicaSnapshot],
        decode: Sequence[ReplicaSnapshot],
        index: PrefixIndex,
        work: OutstandingWork,
        now_s: float,
        open_streams: OpenStreams | None,
        guard: bool = True,
        paced: bool = True,
    ) -> Decision:
        depths = index.prefix_depths(request.block_hashes)
        d_pick = self._pick("decode", request, decode, depths, index, work, open_streams)
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
        streams = d.replica.num_running_requests
        if open_streams is not None:
            streams = max(streams, open_streams.get(d.replica_id))
        guard = guard and self._itl.enabled and streams > 0
        if reason is not None and not guard:
            return self._decision(request, None, d, d, work, now_s, reason, scores, predicted)
        # The measured pace: each side's predicted compute (queued work + this prompt) scaled by
        # its pool's recent measured ÷ predicted prefill seconds (1 when off).
        rp = self.pace.ratio("prefill") if paced else 1.0
        rd = self.pace.ratio("decode") if paced else 1.0
        p_pick = self._pick("prefill", request, prefill, depths, index, work, None, rp)
        p = p_pick.candidate
        scores.update(p_pick.scores)
        remote_ttft_s = rp * (p.outstanding_prefill_s + p.est_prefill_s) + p.transfer_s
        predicted.update(p_pick.fastest)
        predicted[p.replica_id] = remote_ttft_s
        cfg = self.config
        verdict: ItlVerdict | None = None
        weighed: ItlVerdict | None = None  # the verdict that sent a local option remote
        local_ttft_s = rd * d.predicted_ttft_s
        if guard:
            uncached = request.num_prompt_tokens - d.num_cached_tokens
            cost = self._itl.cost(streams, uncached, d.num_cached_tokens)
            local_ttft_s = self._itl.local_ttft_s(
                cost, rd * d.outstanding_prefill_s, rd * d.est_prefill_s
            )
            verdict = self._itl.judge(
                streams, uncached, d.num_cached_tokens, remote_ttft_s - local_ttft_s
            )
        predicted[local] = local_ttft_s
        pace_note = (
            f"; measured pace prefill x{rp:.2f}, decode x{rd:.2f}"
            if paced and self.pace.enabled
            else ""
        )
        if reason is not None and verdict is not None:
            if verdict.local:
                reason = f"{reason}; {verdict.reason}; {verdict.cost.header()}{pace_note}"
                return self._decision(
                    request, None, d, d, work, now_s, reason, scores, predicted, verdict
                )
            reason = f"remote, not local ({verdict.code}): {verdict.reason}{pace_note}"
            weighed = verdict
        else:
            reason = ""
            gain_s = remote_ttft_s - local_ttft_s
            if (
                gain_s >= cfg.spill_min_gain_s
                and rd * d.predicted_ttft_s <= cfg.spill_max_decode_prefill_s
            ):
                spill = (
                    f"spill: local on decode {d.replica_id} predicted {local_ttft_s:.3f} s, "
                    f"remote on {p.replica_id} {remote_ttft_s:.3f} s{pace_note}"
                )
                if verdict is None or verdict.local:
                    if verdict is not None:
                        spill = f"{spill}; {verdict.reason}; {verdict.cost.header()}"
                    return self._decision(
                        request, None, d, d, work, now_s, spill, scores, predicted, verdict
                    )
                reason = f"remote, not spilled ({verdict.code}): {verdict.reason}{pace_note}"
                weighed = verdict
        remote = (
            f"remote: prefill {p.replica_id} has {p.num_cached_tokens // self._block_size}/"
            f"{len(request.block_hashes)} blocks, predicted TTFT {remote_ttft_s:.3f} s; "
            f"decode {d.replica_id}{pace_note}"
        )
        reason = f"{reason}; {remote}" if reason else remote
        return self._decision(
            request, p.replica_id, p, d, work, now_s, reason, scores, predicted, weighed
        )

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
        verdict: ItlVerdict | None = None,
    ) -> Decision:
        """The pdserve decision; `prefilling` is the candidate that computes the prompt (the
        prefill replica, or the decode replica itself for a local prefill). `verdict`: the ITL
        guard's, when it weighed a local prefill."""
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
            itl=None if verdict is None else verdict.code,
            itl_cost=None if verdict is None else verdict.cost,
        )

    def _pick(
        self,
        pool: PoolName,
        request: RequestSummary,
        snapshots: Sequence[ReplicaSnapshot],
        depths: np.ndarray,
        index: PrefixIndex,
        work: OutstandingWork,
        open_streams: OpenStreams | None,
        pace: float = 1.0,
    ) -> PoolPick:
        """Filters, scorers and picker over the pool (pool_kernel.evaluate, the compiled form
        of plugins.py). Raises NoReplicaError when no replica is healthy. `pace` scales the
        fastest replicas' predicted compute in `PoolPick.fastest` (not the pick)."""
        lanes = pool == "prefill" and self.config.lanes
        a = self._arrays(pool, snapshots, index)
        a.sync(index, work, open_streams, self.config.lane_long_prefill_s if lanes else None)
        n = request.num_prompt_tokens
        transfer_s = self._cost.est_remote_extra_s(n) if pool == "prefill" else 0.0
        chosen, _, n_tied, n_top, n_fast = pool_kernel.evaluate(
            depths,
            a.index_slots,
            a.healthy,
            a.requests,
            a.kv_usage,
            a.backlog_s,
            a.mine_s,
            a.longs,
            a.id_rank,
            n,
            self._block_size,
            self._cost_terms,
            transfer_s,
            self.config.max_kv_cache_usage,
            self._lane_terms if lanes else self._no_lane,
            self._weights[pool],
            a.out_cached,
            a.out_est_s,
            a.out_outstanding_s,
            a.out_keep,
            a.out_scores,
            a.out_totals,
            a.out_top,
            a.out_fastest,
        )
        if chosen < 0:
            raise NoReplicaError(pool, f"{len(snapshots)} known, none healthy")
        chosen = int(chosen)
        if n_tied > 1 and self._rng is not None:
            totals = a.out_totals
            tied = np.flatnonzero(a.out_keep & (totals.max() - totals <= TIE_TOLERANCE))
            chosen = int(self._rng.choice(sorted(tied, key=lambda i: a.id_rank[i])))
            a.out_top[0] = chosen
        names = self._scorer_columns[pool]
        table: dict[str, dict[str, float]] = {}
        for row in a.out_top[:n_top]:
            r = int(row)
            values = {name: float(a.out_scores[r, k]) for name, k in names}
            values["total"] = float(a.out_totals[r])
            table[a.snapshots[r].replica_id] = values
        fastest = {
            a.snapshots[r].replica_id: float(
                pace * (a.out_outstanding_s[r] + a.out_est_s[r]) + transfer_s
            )
            for r in (int(x) for x in a.out_fastest[:n_fast])
        }
        return PoolPick(a.candidate(chosen, transfer_s), table, fastest)

    def _arrays(
        self, pool: PoolName, snapshots: Sequence[ReplicaSnapshot], index: PrefixIndex
    ) -> PoolArrays:
        """The pool's arrays for this snapshot list: rebuilt only when the router passes a new
        list (its replica view refreshed)."""
        cached = self._pool_arrays.get(pool)
        if cached is None or cached.snapshots is not snapshots:
            cached = self._pool_arrays[pool] = PoolArrays.build(pool, snapshots, self._cost, index)
        return cached

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
        return baseline_decision(name, request, p, d, reason)

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
            snap = least_loaded("decode", decode)
        else:
            raise ValueError(
                f"unknown routing policy {name!r}: use pdserve, round_robin, least_loaded"
            )
        d = self._candidate("decode", request, snap, index, work)
        return aggregated_baseline_decision(name, request, d)

    def _candidate(
        self,
        pool: PoolName,
        request: RequestSummary,
        snap: ReplicaSnapshot,
        index: PrefixIndex,
        work: OutstandingWork,
    ) -> Candidate:
        return baseline_candidate(
            pool, request, snap, index, work, self._cost, self._block_size, self.config
        )
