"""The compiled decision (pool_kernel over pool arrays kept in step by change logs) against
the list form of the plugins (plugins.py: the definition), on random fleets and event streams:
every pick is the reference's, or scores the same as the reference's pick."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.names import PoolName
from pdserve.router.policy import (
    Decision,
    OutstandingWork,
    PolicyConfig,
    PrefixIndex,
    ReplicaSnapshot,
    RequestSummary,
    RoutingPolicy,
    ScorerWeights,
)
from pdserve.router.policy.pipeline import build_scorers
from pdserve.router.policy.plugins import (
    HealthyFilter,
    KVCapacityFilter,
    LaneFilter,
    MaxScorePicker,
    Pick,
)
from pdserve.router.policy.state import OpenStreams, with_open_streams
from pdserve.router.policy.types import Candidate

BLOCK = 16
TOLERANCE = 1e-9


def reference_pick(
    policy: RoutingPolicy,
    pool: PoolName,
    request: RequestSummary,
    snapshots: list[ReplicaSnapshot],
    index: PrefixIndex,
    work: OutstandingWork,
) -> Pick:
    """The pool's pick by the list-form plugins, candidates evaluated one by one."""
    cfg = policy.config
    cost = cfg.cost_model
    n = request.num_prompt_tokens
    candidates = []
    for s in snapshots:
        cached = min(index.num_cached_blocks(s.replica_id, request.block_hashes) * BLOCK, n)
        candidates.append(
            Candidate(
                s,
                cached,
                cost.est_prefill_s(n - cached, cached),
                max(
                    work.outstanding_s(s.replica_id),
                    cost.est_backlog_s(s.queued_prefill_tokens, s.num_queued_prefills),
                ),
                work.num_long_in_flight(s.replica_id, cfg.lane_long_prefill_s),
                cost.est_remote_extra_s(n) if pool == "prefill" else 0.0,
            )
        )
    for f in (HealthyFilter(), KVCapacityFilter(cfg.max_kv_cache_usage)):
        candidates = f.filter(request, candidates)
    if pool == "prefill" and cfg.lanes:
        candidates = LaneFilter(cfg.lane_long_prefill_s, cfg.lane_max_long_backlog_s).filter(
            request, candidates
        )
    weights = cfg.prefill_weights if pool == "prefill" else cfg.decode_weights
    return MaxScorePicker().pick(request, candidates, build_scorers(weights))


def check_pool(
    got_id: str, got: Decision, ref: Pick, ref_candidates_total: dict[str, float]
) -> bool:
    """True when the pick is the reference's; else its reference total must tie the best."""
    want = ref.candidate.replica_id
    if got_id == want:
        return True
    best = ref_candidates_total[want]
    assert best - ref_candidates_total[got_id] <= TOLERANCE, (got_id, want, got.reason)
    return False


def all_totals(
    policy: RoutingPolicy,
    pool: PoolName,
    request: RequestSummary,
    snapshots: list[ReplicaSnapshot],
    index: PrefixIndex,
    work: OutstandingWork,
) -> dict[str, float]:
    """Reference totals of every candidate that passes the filters (score table of all)."""
    import pdserve.router.policy.plugins as plugins

    old = plugins.SCORE_TABLE_ROWS
    plugins.SCORE_TABLE_ROWS = 10_000
    try:
        pick = reference_pick(policy, pool, request, snapshots, index, work)
    finally:
        plugins.SCORE_TABLE_ROWS = old
    return {rid: row["total"] for rid, row in pick.scores.items()}


def snapshots(pool: PoolName, n: int, rng: random.Random) -> list[ReplicaSnapshot]:
    return [
        ReplicaSnapshot(
            replica_id=f"{pool[0]}{rng.randrange(1000):03d}-{i}",
            pool=pool,
            num_running_requests=rng.choice([0, 0, 1, 3, rng.randrange(40)]),
            num_waiting_requests=rng.choice([0, 0, rng.randrange(5)]),
            kv_cache_usage=rng.choice([0.0, 0.5, 0.95, rng.random()]),
            queued_prefill_tokens=rng.choice([0, 0, rng.randrange(20_000)]),
            num_queued_prefills=rng.randrange(3),
            healthy=rng.random() > 0.1,
        )
        for i in range(n)
    ]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n_prefill=st.integers(1, 80),
    n_decode=st.integers(1, 80),
    lanes=st.booleans(),
    weights=st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=10, max_size=10),
)
def test_compiled_decisions_match_the_plugins(
    seed: int, n_prefill: int, n_decode: int, lanes: bool, weights: list[float]
) -> None:
    rng = random.Random(seed)
    names = ("predicted_ttft", "prefix_overlap", "outstanding_prefill", "running_requests")
    names = (*names, "kv_usage")
    pw = dict(zip(names, weights[:5], strict=True))
    dw = dict(zip(names, weights[5:], strict=True))
    if not any(pw.values()):
        pw["predicted_ttft"] = 1.0
    if not any(dw.values()):
        dw["running_requests"] = 1.0
    cfg = PolicyConfig(
        block_size_tokens=BLOCK,
        lanes=lanes,
        lane_long_prefill_s=0.05,
        prefill_weights=ScorerWeights(**pw),
        decode_weights=ScorerWeights(**dw),
        local_prefill_max_cold_tokens=rng.choice([0, 64]),
        local_prefill_max_uncached_tokens=rng.choice([0, 256]),
    )
    policy = RoutingPolicy(cfg)
    index = PrefixIndex(mode=rng.choice(["events", "approximate"]))  # type: ignore[arg-type]
    prefill = snapshots("prefill", n_prefill, rng)
    decode = snapshots("decode", n_decode, rng)
    chains = [[rng.getrandbits(60) for _ in range(30)] for _ in range(4)]
    work = OutstandingWork()
    streams = OpenStreams()
    in_flight: list[tuple[str, str]] = []
    for step in range(30):
        for _ in range(rng.randrange(6)):  # KV events
            s = rng.choice(prefill + decode)
            chain = rng.choice(chains)
            roll = rng.random()
            if roll < 0.6:
                index.add_blocks(s.replica_id, chain[: rng.randrange(1, 31)])
            elif roll < 0.8:
                index.remove_blocks(s.replica_id, rng.sample(chain, 3))
            elif roll < 0.9:
                index.clear(s.replica_id)
            else:
                index.forget_replica(s.replica_id)
        if rng.random() < 0.15:  # the view refreshed: new lists, new loads
            prefill = [
                dataclasses.replace(s, num_running_requests=rng.randrange(9)) for s in prefill
            ]
            decode = [dataclasses.replace(s, kv_cache_usage=rng.random()) for s in decode]
        while in_flight and rng.random() < 0.4:
            rid, req = in_flight.pop(rng.randrange(len(in_flight)))
            work.finish(rid, req)
            if rid.startswith("d"):
                streams.add(rid, -1)
        chain = rng.choice(chains)
        blocks = chain[: rng.randrange(0, 31)] + [
            rng.getrandbits(60) for _ in range(rng.randrange(4))
        ]
        request = RequestSummary(
            f"q{step}", len(blocks) * BLOCK + rng.randrange(BLOCK), tuple(blocks), 0, 0.0
        )
        if not any(s.healthy for s in prefill) or not any(s.healthy for s in decode):
            continue
        ref_decode = with_open_streams(decode, streams.as_dict())
        d_ref = reference_pick(policy, "decode", request, ref_decode, index, work)
        got = policy.decide(request, prefill, decode, index, work, 0.0, open_streams=streams)
        same_decode = check_pool(
            got.decode_replica_id,
            got,
            d_ref,
            all_totals(policy, "decode", request, ref_decode, index, work),
        )
        if same_decode:
            assert got.scores[got.decode_replica_id] == d_ref.scores[got.decode_replica_id]
            assert got.num_cached_tokens_decode == d_ref.candidate.num_cached_tokens
            if got.prefill_replica_id is not None:
                p_ref = reference_pick(policy, "prefill", request, prefill, index, work)
                if check_pool(
                    got.prefill_replica_id,
                    got,
                    p_ref,
                    all_totals(policy, "prefill", request, prefill, index, work),
                ):
                    assert got.est_prefill_s == p_ref.candidate.est_prefill_s
                    assert got.num_cached_tokens == p_ref.candidate.num_cached_tokens
        prefilling = got.prefill_replica_id or got.decode_replica_id
        work.start(prefilling, request.request_id, got.est_prefill_s, got.engine_priority, 0.0)
        streams.add(got.decode_replica_id, 1)
        in_flight.append((prefilling, request.request_id))
        if got.prefill_replica_id is not None:
            in_flight.append((got.decode_replica_id, "stream-" + request.request_id))
