"""The pieces of the pdserve pipeline: filters, scorers, one picker, the local-prefill decider
and the priority assigner. All pure.

The filters, scorers and picker here are the definition, over lists of `Candidate`s: readable,
and what tests and tools call. The pipeline runs their compiled form, pool_kernel.evaluate,
over a pool's arrays (same formulas, same order of additions); a property test
(tests/unit/policy/test_fleet_equivalence.py) holds the two equal. The decider and the
priority assigner run as they are (once per request).

Order per pool: filters narrow the candidates → scorers rate each in [0, 1] (1 = best) →
the picker takes the highest weighted sum. For decode the decider then says whether the
decode replica prefills locally; the priority assigner sets the engine priority last.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pdserve.router.policy.types import Candidate, RequestSummary

TIE_TOLERANCE = 1e-9
"""Weighted totals closer than this are a tie (identical replicas score identically up to
float noise)."""

# ---- filters ----


class Filter(Protocol):
    """Narrows the candidates of one pool. Returns a new list (maybe empty: the pipeline then
    raises NoReplicaError). Must not reorder in a way callers rely on; no side effects."""

    def filter(
        self, request: RequestSummary, candidates: Sequence[Candidate]
    ) -> list[Candidate]: ...


class HealthyFilter:
    """Keeps replicas whose snapshot says healthy."""

    def filter(self, request: RequestSummary, candidates: Sequence[Candidate]) -> list[Candidate]:
        return [c for c in candidates if c.replica.healthy]


class KVCapacityFilter:
    """Drops replicas whose KV cache usage is above `max_kv_cache_usage` (they would preempt or
    queue), unless that would drop all of them: then all are kept and scorers decide."""

    def __init__(self, max_kv_cache_usage: float) -> None:
        if not 0.0 < max_kv_cache_usage <= 1.0:
            raise ValueError(f"max_kv_cache_usage must be in (0, 1], got {max_kv_cache_usage}")
        self.max_kv_cache_usage = max_kv_cache_usage

    def filter(self, request: RequestSummary, candidates: Sequence[Candidate]) -> list[Candidate]:
        kept = [c for c in candidates if c.replica.kv_cache_usage <= self.max_kv_cache_usage]
        return kept if kept else list(candidates)


class LaneFilter:
    """Keeps short prefills out from behind long ones (prefill pool only).

    A request is long when its cheapest estimate over the candidates is >= `long_prefill_s`.
    - Short: keep replicas with no long prefill in flight, if there are any.
    - Long: keep replicas that already run long prefills and whose queued work is under
      `max_long_backlog_s`, if there are any — long work packs onto a "long lane" while
      other replicas stay free for short requests; past the backlog bound it spills over.
    Otherwise all candidates are kept and the scorers decide."""

    def __init__(self, long_prefill_s: float, max_long_backlog_s: float) -> None:
        if long_prefill_s <= 0 or max_long_backlog_s <= 0:
            raise ValueError("long_prefill_s and max_long_backlog_s must be > 0")
        self.long_prefill_s = long_prefill_s
        self.max_long_backlog_s = max_long_backlog_s

    def is_long(self, candidates: Sequence[Candidate]) -> bool:
        return bool(candidates) and min(c.est_prefill_s for c in candidates) >= self.long_prefill_s

    def filter(self, request: RequestSummary, candidates: Sequence[Candidate]) -> list[Candidate]:
        if self.is_long(candidates):
            kept = [
                c
                for c in candidates
                if c.num_long_in_flight > 0 and c.outstanding_prefill_s < self.max_long_backlog_s
            ]
        else:
            kept = [c for c in candidates if c.num_long_in_flight == 0]
        return kept if kept else list(candidates)


# ---- scorers ----


class Scorer(Protocol):
    """Rates candidates for one request in [0, 1], 1 = best. Pure. `name` keys the weights in
    config and the Decision.scores table.

    `scores` rates all candidates of a pool at once (the picker calls it once per pool per
    request): a relative scorer computes its normaliser once, so a pool of n replicas costs
    O(n). `score` rates one candidate against `all_candidates` (which includes it); it gives the
    same value as its place in `scores` (O(n) per call: for tests and one-off use)."""

    @property
    def name(self) -> str: ...

    def scores(self, request: RequestSummary, candidates: Sequence[Candidate]) -> list[float]: ...

    def score(
        self, request: RequestSummary, candidate: Candidate, all_candidates: Sequence[Candidate]
    ) -> float: ...


def _clamp01(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def _requests(c: Candidate) -> int:
    n: int = c.replica.num_running_requests + c.replica.num_waiting_requests
    return n


def _relative(x: float, best: float) -> float:
    """best / x in [0, 1] for a smaller-is-better quantity; x <= 0 scores 1."""
    return 1.0 if x <= 0.0 else _clamp01(best / x)


class PrefixOverlapScorer:
    """Fraction of the prompt already cached there: cached tokens / prompt tokens
    (0 for an empty prompt). Absolute, not relative: 0.9 means 90 % of the prompt is reused."""

    name = "prefix_overlap"

    def score(
        self, request: RequestSummary, candidate: Candidate, all_candidates: Sequence[Candidate]
    ) -> float:
        return self.scores(request, (candidate,))[0]

    def scores(self, request: RequestSummary, candidates: Sequence[Candidate]) -> list[float]:
        n = request.num_prompt_tokens
        if n <= 0:
            return [0.0] * len(candidates)
        return [_clamp01(c.num_cached_tokens / n) for c in candidates]


class OutstandingPrefillScorer:
    """Who would finish this prefill first. x = outstanding_prefill_s + est_prefill_s (queued
    work there plus this request's own cost there, given that replica's cache: roughly the
    TTFT it would see). Score = min over candidates of x / this x: the best gets 1, a replica
    where the prefill would finish twice as late gets 0.5. Relative and scale-free, so it
    does not reward tiny differences (unlike 1 - x/max, which gives the worst 0 even when
    all are within 1 %). x == 0 scores 1."""

    name = "outstanding_prefill"

    def score(
        self, request: RequestSummary, candidate: Candidate, all_candidates: Sequence[Candidate]
    ) -> float:
        best = min(c.outstanding_prefill_s + c.est_prefill_s for c in all_candidates)
        return _relative(candidate.outstanding_prefill_s + candidate.est_prefill_s, best)

    def scores(self, request: RequestSummary, candidates: Sequence[Candidate]) -> list[float]:
        xs = [c.outstanding_prefill_s + c.est_prefill_s for c in candidates]
        best = min(xs)
        return [_relative(x, best) for x in xs]


class PredictedTTFTScorer:
    """Smallest predicted time to first token (`Candidate.predicted_ttft_s`: queued prefill
    work there + this prompt's uncached prefill there + the KV transfer). Score = min over
    candidates / this one: 1 for the fastest, 0.5 for one predicted twice as slow; x == 0
    scores 1. A replica holding the prompt's prefix wins through its smaller uncached term,
    unless its queue makes it slower than computing the prompt elsewhere."""

    name = "predicted_ttft"

    def score(
        self, request: RequestSummary, candidate: Candidate, all_candidates: Sequence[Candidate]
    ) -> float:
        best = min(c.predicted_ttft_s for c in all_candidates)
        return _relative(candidate.predicted_ttft_s, best)

    def scores(self, request: RequestSummary, candidates: Sequence[Candidate]) -> list[float]:
        xs = [c.predicted_ttft_s for c in candidates]
        best = min(xs)
        return [_relative(x, best) for x in xs]


class RunningRequestsScorer:
    """Fewer requests on the replica is better. n = running + waiting; score =
    (1 + min n over candidates) / (1 + n): 1 for the least busy, 0.5 for one with twice the
    (n + 1). The +1 keeps idle replicas comparable (0 vs 1 request is not infinitely worse)."""

    name = "running_requests"

    def score(
        self, request: RequestSummary, candidate: Candidate, all_candidates: Sequence[Candidate]
    ) -> float:
        best = min(_requests(c) for c in all_candidates)
        return _clamp01((1 + best) / (1 + _requests(candidate)))

    def scores(self, request: RequestSummary, candidates: Sequence[Candidate]) -> list[float]:
        ns = [_requests(c) for c in candidates]
        best = min(ns)
        return [_clamp01((1 + best) / (1 + n)) for n in ns]


class KVUsageScorer:
    """Free KV cache: 1 - kv_cache_usage (absolute)."""

    name = "kv_usage"

    def score(
        self, request: RequestSummary, candidate: Candidate, all_candidates: Sequence[Candidate]
    ) -> float:
        return _clamp01(1.0 - candidate.replica.kv_cache_usage)

    def scores(self, request: RequestSummary, candidates: Sequence[Candidate]) -> list[float]:
        return [_clamp01(1.0 - c.replica.kv_cache_usage) for c in candidates]


# ---- picker ----


@dataclass(frozen=True, slots=True)
class WeightedScorer:
    """A scorer and its weight (>= 0) in the picker's sum."""

    scorer: Scorer
    weight: float


SCORE_TABLE_ROWS = 4
"""Replicas per pool kept in a Pick's (and so the Decision's) score table: the best by total
(the chosen one among them). At fleet size a full table would cost more than the decision."""


@dataclass(frozen=True, slots=True)
class Pick:
    """The picker's choice and its inputs for the best `SCORE_TABLE_ROWS` replicas: replica
    id → scorer name → score, plus "total"."""

    candidate: Candidate
    scores: dict[str, dict[str, float]]


class Picker(Protocol):
    """Chooses exactly one candidate from a non-empty list. Called once per pool per request."""

    def pick(
        self,
        request: RequestSummary,
        candidates: Sequence[Candidate],
        scorers: Sequence[WeightedScorer],
    ) -> Pick: ...


class MaxScorePicker:
    """Highest weighted sum of scores wins. Ties (within TIE_TOLERANCE) go to the lowest
    replica_id, or to a uniform choice among the tied with the injected `rng` if given."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng

    def pick(
        self,
        request: RequestSummary,
        candidates: Sequence[Candidate],
        scorers: Sequence[WeightedScorer],
    ) -> Pick:
        if not candidates:
            raise ValueError("MaxScorePicker.pick needs at least one candidate")
        columns = [(ws, ws.scorer.scores(request, candidates)) for ws in scorers]
        totals = [0.0] * len(candidates)
        for ws, values in columns:
            w = ws.weight
            totals = [t + w * v for t, v in zip(totals, values, strict=True)]
        top = max(totals)
        tied = [i for i, t in enumerate(totals) if top - t <= TIE_TOLERANCE]
        if len(tied) == 1:
            chosen = tied[0]
        else:
            tied.sort(key=lambda i: candidates[i].replica.replica_id)
            chosen = self._rng.choice(tied) if self._rng is not None else tied[0]
        if len(candidates) <= SCORE_TABLE_ROWS:
            rows: list[int] = list(range(len(candidates)))
        else:
            best = heapq.nlargest(SCORE_TABLE_ROWS, range(len(candidates)), key=totals.__getitem__)
            rows = ([chosen] + [i for i in best if i != chosen])[:SCORE_TABLE_ROWS]
        table: dict[str, dict[str, float]] = {}
        for i in rows:
            row = {ws.scorer.name: values[i] for ws, values in columns}
            row["total"] = totals[i]
            table[candidates[i].replica.replica_id] = row
        return Pick(candidate=candidates[chosen], scores=table)


# ---- decider ----


class Decider(Protocol):
    """Remote or local prefill, given the chosen decode candidate. Called once per request."""

    def reason(self, request: RequestSummary, decode: Candidate) -> str | None:
        """Why to prefill on `decode` (shown in the decision header), or None: remote."""
        ...


class LocalPrefillDecider:
    """Prefill on the decode replica itself, skipping the prefill pool and the KV transfer,
    in two cases (uncached = prompt - what the decode replica already holds):

    - extend: the decode replica holds part of the prompt (at least one cached block) and
      uncached < `local_prefill_max_uncached_tokens` (N): extending a cached prefix locally is
      cheaper than a remote prefill plus a KV transfer (agent loops: each step adds a little);
    - cold: uncached < `local_prefill_max_cold_tokens` (C), even when decode holds nothing: a
      prefill this small costs the decode engine about one step, less than the remote round
      trip, the prefill replica's work and the KV transfer it replaces (selective
      disaggregation; a short chat turn is the common case).

    N = 0 and C = 0 disable each case."""

    def __init__(
        self, local_prefill_max_uncached_tokens: int, local_prefill_max_cold_tokens: int = 0
    ) -> None:
        for name, value in (
            ("local_prefill_max_uncached_tokens", local_prefill_max_uncached_tokens),
            ("local_prefill_max_cold_tokens", local_prefill_max_cold_tokens),
        ):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        self.max_uncached_tokens = local_prefill_max_uncached_tokens
        self.max_cold_tokens = local_prefill_max_cold_tokens

    def prefill_locally(self, request: RequestSummary, decode: Candidate) -> bool:
        return self.reason(request, decode) is not None

    def reason(self, request: RequestSummary, decode: Candidate) -> str | None:
        """Why to prefill on `decode` (for the decision header), or None to prefill remotely."""
        uncached: int = request.num_prompt_tokens - decode.num_cached_tokens
        if uncached < self.max_cold_tokens:
            return (
                f"local: {uncached} uncached tokens (< {self.max_cold_tokens}) "
                f"on decode {decode.replica_id}"
            )
        if decode.num_cached_tokens > 0 and uncached < self.max_uncached_tokens:
            return (
                f"local: decode {decode.replica_id} holds all but {uncached} tokens "
                f"(< {self.max_uncached_tokens})"
            )
        return None


# ---- priority ----


class PriorityAssigner:
    """Engine priority (vLLM priority scheduling: lower value = served first), short first.

    bucket = 0 if est_prefill_s <= base, else ceil(log2(est_prefill_s / base)), capped at
    max_priority_levels - 1: with base 0.05 s, (0.05, 0.1] → 1, (0.1, 0.2] → 2, ...
    priority = bucket + client_priority (the client's own offset, same convention).

    Aging: `starving_priority` (from OutstandingWork.starving_priority for the replica that
    will prefill) is the least urgent priority among that replica's prefills that have waited
    longer than their estimate + aging_s. When set, the result is max(priority,
    starving_priority): the new request no longer jumps ahead of starving ones (equal
    priority is served in arrival order), so a long request waits at most until the queue
    ahead of it drains. Aging can exceed the level cap; it never lowers a number.
    """

    def __init__(self, priority_bucket_base_s: float, max_priority_levels: int) -> None:
        if priority_bucket_base_s <= 0:
            raise ValueError(f"priority_bucket_base_s must be > 0, got {priority_bucket_base_s}")
        if max_priority_levels < 1:
            raise ValueError(f"max_priority_levels must be >= 1, got {max_priority_levels}")
        self.base_s = priority_bucket_base_s
        self.max_levels = max_priority_levels

    def bucket(self, est_prefill_s: float) -> int:
        """The cost bucket alone (0 = cheapest), before client offset and aging."""
        if est_prefill_s <= self.base_s:
            return 0
        return min(self.max_levels - 1, math.ceil(math.log2(est_prefill_s / self.base_s)))

    def assign(
        self, request: RequestSummary, est_prefill_s: float, starving_priority: int | None
    ) -> int:
        """The engine priority for `request` given its estimated prefill seconds on the chosen
        replica and that replica's starving priority (None: nothing starving)."""
        priority: int = self.bucket(est_prefill_s) + request.client_priority
        if starving_priority is not None and priority < starving_priority:
            return starving_priority
        return priority
