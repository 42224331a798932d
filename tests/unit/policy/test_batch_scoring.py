"""The picker rates a whole pool at once (each scorer's normaliser computed once per pool):
the same picks and scores as rating every candidate on its own against all the others (the
pipeline's O(n^2) form before fleet-size routing), on random pools (hypothesis)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.router.policy import Candidate
from pdserve.router.policy.config import ScorerWeights
from pdserve.router.policy.pipeline import build_scorers
from pdserve.router.policy.plugins import (
    SCORE_TABLE_ROWS,
    TIE_TOLERANCE,
    MaxScorePicker,
    WeightedScorer,
)
from tests.unit.policy.factories import cand, req

WEIGHTS = ScorerWeights(
    predicted_ttft=1.0, prefix_overlap=0.7, outstanding_prefill=0.5, running_requests=0.3,
    kv_usage=0.2,
)  # fmt: skip


@st.composite
def pools(draw: st.DrawFn) -> list[Candidate]:
    n = draw(st.integers(1, 40))
    # Few distinct values, so ties are common (the tie rule must hold too).
    return [
        cand(
            f"r{i:02d}",
            cached=draw(st.sampled_from([0, 128, 512, 1024])),
            est=draw(st.sampled_from([0.0, 0.05, 0.1, 0.4])),
            outstanding=draw(st.sampled_from([0.0, 0.2, 1.0])),
            running=draw(st.integers(0, 3)),
            waiting=draw(st.integers(0, 1)),
            kv=draw(st.sampled_from([0.0, 0.5, 0.9])),
        )
        for i in range(n)
    ]


def one_by_one(
    candidates: Sequence[Candidate], scorers: Sequence[WeightedScorer]
) -> tuple[str, dict[str, dict[str, float]]]:
    """The reference: every candidate scored alone against all (the old picker)."""
    request = req(2048)
    table = {}
    for c in candidates:
        row = {ws.scorer.name: ws.scorer.score(request, c, candidates) for ws in scorers}
        row["total"] = sum(ws.weight * row[ws.scorer.name] for ws in scorers)
        table[c.replica_id] = row
    top = max(r["total"] for r in table.values())
    tied = sorted(rid for rid, r in table.items() if top - r["total"] <= TIE_TOLERANCE)
    return tied[0], table


@settings(max_examples=300, deadline=None)
@given(pools())
def test_batch_scoring_picks_and_scores_like_scoring_one_by_one(pool: list[Candidate]) -> None:
    scorers = build_scorers(WEIGHTS)
    want_id, want_table = one_by_one(pool, scorers)
    pick = MaxScorePicker().pick(req(2048), pool, scorers)
    assert pick.candidate.replica_id == want_id
    assert want_id in pick.scores and len(pick.scores) == min(SCORE_TABLE_ROWS, len(pool))
    for rid, row in pick.scores.items():
        assert row == want_table[rid]
    # The table keeps the best totals.
    kept = sorted((r["total"] for r in pick.scores.values()), reverse=True)
    best = sorted((r["total"] for r in want_table.values()), reverse=True)[: len(kept)]
    assert all(abs(a - b) <= TIE_TOLERANCE for a, b in zip(kept, best, strict=True))
