"""Filters, scorers, picker, decider and priority assigner, table by table."""

from __future__ import annotations

import random

import pytest

from pdserve.router.policy import Candidate, ReplicaSnapshot
from pdserve.router.policy.plugins import (
    HealthyFilter,
    KVCapacityFilter,
    KVUsageScorer,
    LaneFilter,
    LocalPrefillDecider,
    MaxScorePicker,
    OutstandingPrefillScorer,
    PrefixOverlapScorer,
    PriorityAssigner,
    RunningRequestsScorer,
    Scorer,
    WeightedScorer,
)
from tests.unit.policy.factories import cand, req


def ids(cs: list[Candidate]) -> list[str]:
    return [c.replica_id for c in cs]


# ---- filters ----


def test_healthy_filter_drops_unhealthy() -> None:
    cs = [cand("a"), cand("b", healthy=False), cand("c")]
    assert ids(HealthyFilter().filter(req(), cs)) == ["a", "c"]
    assert HealthyFilter().filter(req(), [cand("b", healthy=False)]) == []


@pytest.mark.parametrize(
    ("usages", "threshold", "want"),
    [
        ([0.1, 0.5, 0.99], 0.9, ["r0", "r1"]),
        ([0.9, 0.91], 0.9, ["r0"]),  # the threshold itself is allowed
        ([0.95, 0.99], 0.9, ["r0", "r1"]),  # all above: keep all, scorers decide
        ([0.2], 0.1, ["r0"]),
    ],
)
def test_kv_capacity_filter(usages: list[float], threshold: float, want: list[str]) -> None:
    cs = [cand(f"r{i}", kv=u) for i, u in enumerate(usages)]
    assert ids(KVCapacityFilter(threshold).filter(req(), cs)) == want


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_kv_capacity_filter_rejects_bad_threshold(bad: float) -> None:
    with pytest.raises(ValueError, match="max_kv_cache_usage"):
        KVCapacityFilter(bad)


# ---- scorers ----

SCORER_CASES: list[tuple[Scorer, int, list[Candidate], list[float]]] = [
    # prefix overlap: cached / prompt, absolute
    (PrefixOverlapScorer(), 1000, [cand("a", cached=0), cand("b", cached=500)], [0.0, 0.5]),
    (PrefixOverlapScorer(), 1000, [cand("a", cached=1000)], [1.0]),
    (PrefixOverlapScorer(), 0, [cand("a", cached=0)], [0.0]),
    (PrefixOverlapScorer(), 100, [cand("a", cached=200)], [1.0]),  # clamped
    # outstanding prefill: min(x) / x with x = outstanding + own estimate
    (
        OutstandingPrefillScorer(),
        1000,
        [cand("a", outstanding=5.0, est=0.1), cand("b", outstanding=0.1, est=0.1)],
        [0.2 / 5.1, 1.0],
    ),
    (
        OutstandingPrefillScorer(),
        1000,
        [cand("a", outstanding=1.0, est=1.0), cand("b", outstanding=0.0, est=1.0)],
        [0.5, 1.0],
    ),
    (OutstandingPrefillScorer(), 1000, [cand("a", est=0.0), cand("b", est=1.0)], [1.0, 0.0]),
    # running requests: (1 + min n) / (1 + n), n = running + waiting
    (
        RunningRequestsScorer(),
        1000,
        [cand("a", running=1), cand("b", running=2, waiting=1), cand("c")],
        [0.5, 0.25, 1.0],
    ),
    (RunningRequestsScorer(), 1000, [cand("a", running=3), cand("b", running=3)], [1.0, 1.0]),
    # kv usage: 1 - usage
    (
        KVUsageScorer(),
        1000,
        [cand("a", kv=0.0), cand("b", kv=0.75), cand("c", kv=1.0)],
        [1, 0.25, 0],
    ),
]


@pytest.mark.parametrize(("scorer", "prompt", "cands", "want"), SCORER_CASES)
def test_scorer(scorer: Scorer, prompt: int, cands: list[Candidate], want: list[float]) -> None:
    r = req(prompt, ())
    got = [scorer.score(r, c, cands) for c in cands]
    assert got == pytest.approx(want)
    assert all(0.0 <= s <= 1.0 for s in got)


# ---- picker ----


def test_picker_takes_max_weighted_sum_and_records_scores() -> None:
    cs = [cand("a", cached=0, kv=0.0), cand("b", cached=900, kv=0.5)]
    scorers = [WeightedScorer(PrefixOverlapScorer(), 2.0), WeightedScorer(KVUsageScorer(), 1.0)]
    pick = MaxScorePicker().pick(req(1000, ()), cs, scorers)
    assert pick.candidate.replica_id == "b"
    assert pick.scores["a"] == {"prefix_overlap": 0.0, "kv_usage": 1.0, "total": 1.0}
    assert pick.scores["b"]["total"] == pytest.approx(2 * 0.9 + 0.5)


def test_picker_weights_change_the_winner() -> None:
    cs = [cand("a", cached=0, kv=0.0), cand("b", cached=900, kv=0.5)]
    scorers = [WeightedScorer(PrefixOverlapScorer(), 0.1), WeightedScorer(KVUsageScorer(), 1.0)]
    assert MaxScorePicker().pick(req(1000, ()), cs, scorers).candidate.replica_id == "a"


def test_picker_ties_go_to_lowest_id_or_rng() -> None:
    cs = [cand("c"), cand("a"), cand("b")]
    scorers = [WeightedScorer(KVUsageScorer(), 1.0)]
    assert MaxScorePicker().pick(req(), cs, scorers).candidate.replica_id == "a"
    rng_picks = {
        MaxScorePicker(random.Random(seed)).pick(req(), cs, scorers).candidate.replica_id
        for seed in range(30)
    }
    assert rng_picks == {"a", "b", "c"}
    again = MaxScorePicker(random.Random(3)).pick(req(), cs, scorers).candidate.replica_id
    assert again == MaxScorePicker(random.Random(3)).pick(req(), cs, scorers).candidate.replica_id


def test_picker_needs_a_candidate() -> None:
    with pytest.raises(ValueError, match="at least one candidate"):
        MaxScorePicker().pick(req(), [], [])


# ---- decider ----


@pytest.mark.parametrize(
    ("prompt", "cached_on_decode", "n", "local"),
    [
        (4096, 4096, 256, True),  # fully cached
        (4096, 3996, 256, True),  # all but 100
        (4096, 3841, 256, True),  # all but 255: just under
        (4096, 3840, 256, False),  # all but 256: not < N
        (4096, 0, 256, False),
        (200, 0, 256, False),  # nothing cached on decode: even short prompts go to prefill
        (200, 128, 256, True),  # one cached block, 72 uncached: extend it locally
        (4096, 4096, 0, False),  # N = 0 disables local prefill
        (10, 10, 0, False),
    ],
)
def test_local_prefill_decider(prompt: int, cached_on_decode: int, n: int, local: bool) -> None:
    decider = LocalPrefillDecider(n)
    assert decider.prefill_locally(req(prompt, ()), cand("d0", cached=cached_on_decode)) is local


@pytest.mark.parametrize(
    ("prompt", "cached_on_decode", "n", "c", "local"),
    [
        (50, 0, 256, 64, True),  # cold but small: local
        (64, 0, 256, 64, False),  # not < C
        (1500, 0, 256, 64, False),  # cold and large: remote
        (1500, 1472, 0, 64, True),  # 28 uncached: under C even with N = 0
        (300, 100, 256, 64, True),  # 200 uncached on a cached prefix: the extend case
        (50, 0, 256, 0, False),  # C = 0: cold prompts always go remote
    ],
)
def test_local_prefill_decider_cold_threshold(
    prompt: int, cached_on_decode: int, n: int, c: int, local: bool
) -> None:
    decider = LocalPrefillDecider(n, c)
    assert decider.prefill_locally(req(prompt, ()), cand("d0", cached=cached_on_decode)) is local
    if local:
        assert decider.reason(req(prompt, ()), cand("d0", cached=cached_on_decode)).startswith(
            "local: "
        )


def test_local_prefill_decider_rejects_negative() -> None:
    with pytest.raises(ValueError, match="local_prefill_max_uncached_tokens"):
        LocalPrefillDecider(-1)
    with pytest.raises(ValueError, match="local_prefill_max_cold_tokens"):
        LocalPrefillDecider(256, -1)


# ---- priority ----


@pytest.mark.parametrize(
    ("est_s", "bucket"),
    [
        (0.0, 0),
        (0.01, 0),
        (0.05, 0),
        (0.06, 1),
        (0.1, 1),
        (0.11, 2),
        (0.2, 2),
        (0.4, 3),
        (1.0, 5),
        (1000.0, 7),  # capped at max_priority_levels - 1
    ],
)
def test_priority_bucket(est_s: float, bucket: int) -> None:
    assert PriorityAssigner(0.05, 8).bucket(est_s) == bucket


def test_short_requests_get_a_lower_number_than_long_ones() -> None:
    pa = PriorityAssigner(0.05, 8)
    assert pa.assign(req(), 0.03, None) < pa.assign(req(), 0.5, None) < pa.assign(req(), 3.0, None)


@pytest.mark.parametrize(
    ("est_s", "client", "starving", "want"),
    [
        (0.03, 0, None, 0),
        (0.03, 2, None, 2),  # client offset added
        (0.4, -1, None, 2),
        (0.03, 0, 4, 4),  # a starving request at 4: new short ones no longer jump ahead
        (0.4, 0, 1, 3),  # aging never makes a number lower
        (1000.0, 0, 9, 9),  # aging may exceed the level cap
        (0.03, 5, 4, 5),
    ],
)
def test_priority_assign_with_client_offset_and_aging(
    est_s: float, client: int, starving: int | None, want: int
) -> None:
    pa = PriorityAssigner(0.05, 8)
    assert pa.assign(req(client_priority=client), est_s, starving) == want


@pytest.mark.parametrize(("levels", "top"), [(1, 0), (2, 1), (4, 3)])
def test_priority_levels_cap(levels: int, top: int) -> None:
    assert PriorityAssigner(0.05, levels).bucket(1e9) == top


@pytest.mark.parametrize(("base", "levels"), [(0.0, 8), (-1.0, 8), (0.05, 0)])
def test_priority_assigner_rejects_bad_settings(base: float, levels: int) -> None:
    with pytest.raises(ValueError, match="priority"):
        PriorityAssigner(base, levels)


# ---- lanes ----


def _lane_cand(rid: str, est: float, longs: int, backlog: float) -> Candidate:
    return Candidate(
        replica=ReplicaSnapshot(rid, "prefill", 0, 0, 0.0, 0),
        num_cached_tokens=0,
        est_prefill_s=est,
        outstanding_prefill_s=backlog,
        num_long_in_flight=longs,
    )


@pytest.mark.parametrize(
    ("est", "replicas", "kept"),
    [
        # short request: avoid replicas running long prefills
        (0.02, [("p0", 2, 1.0), ("p1", 0, 0.0)], ["p1"]),
        # short request, every replica busy with long work: keep all
        (0.02, [("p0", 1, 1.0), ("p1", 1, 0.5)], ["p0", "p1"]),
        # long request packs onto the long lane
        (0.5, [("p0", 1, 0.8), ("p1", 0, 0.0)], ["p0"]),
        # long lane past its backlog bound: spill over (keep all, scorers decide)
        (0.5, [("p0", 3, 2.5), ("p1", 0, 0.0)], ["p0", "p1"]),
        # no long work anywhere: keep all
        (0.5, [("p0", 0, 0.0), ("p1", 0, 0.0)], ["p0", "p1"]),
    ],
)
def test_lane_filter(est: float, replicas: list[tuple[str, int, float]], kept: list[str]) -> None:
    lane = LaneFilter(long_prefill_s=0.1, max_long_backlog_s=2.0)
    cands = [_lane_cand(rid, est, longs, backlog) for rid, longs, backlog in replicas]
    assert [c.replica_id for c in lane.filter(req(100, ()), cands)] == kept
