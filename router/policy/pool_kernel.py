"""The pdserve pipeline's per-pool step, compiled (numba, pure): filters → scorers → pick over
a pool's arrays in one pass, so a decision's cost is a few microseconds per pool however many
replicas it has.

This is the compiled form of plugins.py (HealthyFilter, KVCapacityFilter, LaneFilter, the five
scorers, MaxScorePicker): the same formulas, evaluated in the same order (weighted scores are
added in `build_scorers`' order, so totals equal the list form's to the last bit).
tests/unit/policy/test_fleet_equivalence.py checks the two against each other on random fleets
and event streams. Adding a scorer means adding it in both places and to `SCORER_ORDER`.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from pdserve.router.policy.plugins import SCORE_TABLE_ROWS, TIE_TOLERANCE

SCORER_ORDER = (
    "predicted_ttft",
    "prefix_overlap",
    "outstanding_prefill",
    "running_requests",
    "kv_usage",
)
"""The weight vector's order (the order `build_scorers` adds scores in)."""
TOP_ROWS = SCORE_TABLE_ROWS
"""Rows returned by total (the score table) and by predicted TTFT (the fastest)."""


@nb.njit(cache=True, inline="always")
def _relative(x: float, best: float) -> float:
    if x <= 0.0:
        return 1.0
    r = best / x
    return 0.0 if r < 0.0 else 1.0 if r > 1.0 else r


@nb.njit(cache=True, inline="always")
def _clamp01(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


@nb.njit(cache=True)
def _top(values: np.ndarray, keep: np.ndarray, k: int, largest: bool, out: np.ndarray) -> int:
    """Rows of the k largest (or smallest) `values` among kept rows, best first (ties: lower
    row first), into `out`; returns how many."""
    n = 0
    for i in range(values.shape[0]):
        if not keep[i]:
            continue
        v = values[i]
        j = n if n < k else k
        while j > 0:
            w = values[out[j - 1]]
            if (v > w) if largest else (v < w):
                j -= 1
            else:
                break
        if j >= k:
            continue
        last = n if n < k else k - 1
        for m in range(last, j, -1):
            out[m] = out[m - 1]
        out[j] = i
        if n < k:
            n += 1
    return n


@nb.njit(cache=True)
def evaluate(
    depth: np.ndarray,
    slots: np.ndarray,
    healthy: np.ndarray,
    requests: np.ndarray,
    kv_usage: np.ndarray,
    backlog_s: np.ndarray,
    mine_s: np.ndarray,
    longs: np.ndarray,
    id_rank: np.ndarray,
    num_prompt_tokens: int,
    block_size_tokens: int,
    cost: np.ndarray,
    transfer_s: float,
    max_kv_usage: float,
    lane: np.ndarray,
    weights: np.ndarray,
    cached: np.ndarray,
    est_s: np.ndarray,
    outstanding_s: np.ndarray,
    keep: np.ndarray,
    scores: np.ndarray,
    totals: np.ndarray,
    top_rows: np.ndarray,
    fastest_rows: np.ndarray,
) -> tuple[int, int, int, int, int]:
    """Evaluate one pool for one request; every array has one row per replica.

    In: `depth[slots[i]]` the replica's held prefix in blocks; `healthy`, `requests` (running
    + waiting, at least this router's open streams), `kv_usage`, `backlog_s` (the engine's
    reported queue, costed), `mine_s` (this router's in-flight estimates), `longs` (its long
    prefills in flight), `id_rank` (rank of the replica id, for ties); `cost` = (fixed,
    per token, per token²) seconds; `lane` = (on, long_prefill_s, max_long_backlog_s);
    `weights` in SCORER_ORDER.
    Out (written): `cached` tokens, `est_s`, `outstanding_s`, `keep` (passed the filters),
    `scores[i, k]`, `totals`, `top_rows` (best totals, the chosen first), `fastest_rows`
    (smallest predicted TTFT).
    Returns (chosen row or -1 when no replica is healthy, rows kept, rows tied with the
    best, rows in top_rows, rows in fastest_rows).
    """
    n = healthy.shape[0]
    fixed, per_token, per_token_sq = cost[0], cost[1], cost[2]
    n_healthy = 0
    n_kv = 0
    for i in range(n):
        c = min(np.int64(depth[slots[i]]) * block_size_tokens, np.int64(num_prompt_tokens))
        cached[i] = c
        u = float(num_prompt_tokens - c)
        est_s[i] = fixed + per_token * u + per_token_sq * u * (u / 2 + c)
        outstanding_s[i] = mine_s[i] if mine_s[i] > backlog_s[i] else backlog_s[i]
        keep[i] = healthy[i]
        if healthy[i]:
            n_healthy += 1
            if kv_usage[i] <= max_kv_usage:
                n_kv += 1
    if n_healthy == 0:
        return -1, 0, 0, 0, 0
    if 0 < n_kv < n_healthy:  # KVCapacityFilter (all kept when none passes)
        for i in range(n):
            if keep[i] and kv_usage[i] > max_kv_usage:
                keep[i] = False
    if lane[0] > 0.0:  # LaneFilter (prefill, lanes on)
        cheapest = np.inf
        for i in range(n):
            if keep[i] and est_s[i] < cheapest:
                cheapest = est_s[i]
        is_long = cheapest >= lane[1]
        n_lane = 0
        n_kept = 0
        for i in range(n):
            if keep[i]:
                n_kept += 1
                if (longs[i] > 0 and outstanding_s[i] < lane[2]) if is_long else longs[i] == 0:
                    n_lane += 1
        if 0 < n_lane < n_kept:
            for i in range(n):
                if keep[i] and not (
                    (longs[i] > 0 and outstanding_s[i] < lane[2]) if is_long else longs[i] == 0
                ):
                    keep[i] = False
    best_ttft = np.inf
    best_finish = np.inf
    best_requests = np.iinfo(np.int64).max
    n_kept = 0
    for i in range(n):
        if not keep[i]:
            continue
        n_kept += 1
        ttft = outstanding_s[i] + est_s[i] + transfer_s
        finish = outstanding_s[i] + est_s[i]
        if ttft < best_ttft:
            best_ttft = ttft
        if finish < best_finish:
            best_finish = finish
        if requests[i] < best_requests:
            best_requests = requests[i]
    top = -np.inf
    for i in range(n):
        if not keep[i]:
            totals[i] = -np.inf
            continue
        ttft = outstanding_s[i] + est_s[i] + transfer_s
        scores[i, 0] = _relative(ttft, best_ttft)
        scores[i, 1] = _clamp01(cached[i] / num_prompt_tokens) if num_prompt_tokens > 0 else 0.0
        scores[i, 2] = _relative(outstanding_s[i] + est_s[i], best_finish)
        scores[i, 3] = _clamp01((1 + best_requests) / (1 + requests[i]))
        scores[i, 4] = _clamp01(1.0 - kv_usage[i])
        total = 0.0
        for k in range(5):
            if weights[k] > 0.0:
                total = total + weights[k] * scores[i, k]
        totals[i] = total
        if total > top:
            top = total
    chosen = -1
    n_tied = 0
    for i in range(n):
        if keep[i] and top - totals[i] <= TIE_TOLERANCE:
            n_tied += 1
            if chosen < 0 or id_rank[i] < id_rank[chosen]:
                chosen = i
    k = top_rows.shape[0]
    n_top = _top(totals, keep, k, True, top_rows)
    at = -1
    for j in range(n_top):
        if top_rows[j] == chosen:
            at = j
    if at < 0:  # the chosen row lost a tie for the last place: it goes in first anyway
        at = n_top if n_top < k else k - 1
        if n_top < k:
            n_top += 1
    for m in range(at, 0, -1):  # the chosen row first, then the others by total
        top_rows[m] = top_rows[m - 1]
    top_rows[0] = chosen
    ttfts = outstanding_s + est_s
    n_fast = _top(ttfts, keep, fastest_rows.shape[0], False, fastest_rows)
    return chosen, n_kept, n_tied, n_top, n_fast
