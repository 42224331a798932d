"""Properties of the simulator over generated workloads (hypothesis, derandomized): every
request completes once with a consistent timeline, whatever the layout and host; one seed
gives one run; more prefill replicas never predict a longer prefill queue at the same load;
a cached prefix never predicts a slower first token."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.router.policy.config import PolicyConfig
from pdserve.sim.cpu_host import CpuHost
from pdserve.sim.simulator import Simulation
from pdserve.sim.workload import SimRequest
from tests.unit.sim.helpers import BLOCK, PROFILE, layout

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)
NOISY = PROFILE.with_host(
    CpuHost(
        host_cores=2, host_contention=3.0, engine_step_extra_s=0.001, step_speed_sigma=0.3,
        serving_jitter_sigma=0.5, decode_jitter_sigma=0.5, client_s=0.004,
        client_jitter_sigma=0.4, host_stall_rate_per_s=5.0, host_stall_median_s=0.02,
        local_intake_per_token_s=2e-6,
    )
)  # fmt: skip
"""A host with every kind of effect at once."""
LAYOUTS = {
    "aggregated x1": layout(),
    "aggregated x2": layout(num_decode=2),
    "1P1D": layout(num_prefill=1),
    "2P1D shared core": layout(num_prefill=2, groups=("p", "p", "d0")),
}

lengths = st.integers(min_value=1, max_value=3000)
requests_st = st.lists(
    st.tuples(lengths, st.integers(min_value=1, max_value=12), st.floats(0.0, 2.0)),
    min_size=1,
    max_size=30,
)


def _requests(specs: list[tuple[int, int, float]], closed: bool) -> list[SimRequest]:
    return [
        SimRequest(
            f"r{i}", "all", None if closed else at, n, out,
            tuple(range(i * 10_000, i * 10_000 + n // BLOCK)),
        )
        for i, (n, out, at) in enumerate(specs)
    ]  # fmt: skip


@SETTINGS
@given(
    specs=requests_st,
    closed=st.booleans(),
    name=st.sampled_from(sorted(LAYOUTS)),
    noisy=st.booleans(),
    seed=st.integers(0, 3),
)
def test_every_request_completes_once_with_a_consistent_timeline(
    specs: list[tuple[int, int, float]], closed: bool, name: str, noisy: bool, seed: int
) -> None:
    requests = _requests(specs, closed)
    profile = NOISY if noisy else PROFILE
    concurrency = 4 if closed else None
    out = Simulation(LAYOUTS[name], profile, concurrency=concurrency, seed=seed).run(requests)
    assert [r.request.request_id for r in out.results] == [r.request_id for r in requests]
    for r in out.results:
        assert r.ttft_s is not None and r.e2e_s is not None
        assert 0 < r.ttft_s <= r.e2e_s + 1e-12
        assert all(g >= -1e-12 for g in r.chunk_gaps_s)
        assert sum(r.chunk_gaps_s) == pytest.approx(r.e2e_s - r.ttft_s, rel=1e-9, abs=1e-12)
        assert len(r.chunk_gaps_s) <= r.request.output_tokens - 1
        assert r.decision is not None
        assert r.local_prefill == (r.decision.prefill_replica_id is None)
        assert all(v >= -1e-9 for k, v in r.stages.items() if k != "decode"), r.stages
    again = Simulation(LAYOUTS[name], profile, concurrency=concurrency, seed=seed).run(requests)
    assert [(r.ttft_s, r.chunk_gaps_s) for r in again.results] == [
        (r.ttft_s, r.chunk_gaps_s) for r in out.results
    ]


REMOTE_ONLY = PolicyConfig(
    block_size_tokens=BLOCK, local_prefill_max_cold_tokens=0, local_prefill_max_uncached_tokens=0,
    spill_max_decode_prefill_s=0, lanes=False,
)  # fmt: skip
"""Every prompt prefilled remotely, so the prefill pool's queue is the only one that moves."""


@SETTINGS
@given(specs=requests_st, rate_scale=st.sampled_from([0.05, 0.2, 1.0]))
def test_more_prefill_replicas_never_predict_a_longer_prefill_queue(
    specs: list[tuple[int, int, float]], rate_scale: float
) -> None:
    requests = _requests([(n, out, at * rate_scale) for n, out, at in specs], closed=False)

    def mean_queue_s(num_prefill: int) -> float:
        lay = layout(num_prefill=num_prefill, policy=REMOTE_ONLY)
        results = Simulation(lay, PROFILE).run(requests).results
        assert all(r.decision and r.decision.prefill_replica_id for r in results)
        return statistics.fmean(r.stages["prefill_queue"] for r in results)

    one, two, three = mean_queue_s(1), mean_queue_s(2), mean_queue_s(3)
    assert two <= one + 1e-9 and three <= two + 1e-9


@SETTINGS
@given(
    prefix_blocks=st.integers(min_value=1, max_value=150),
    extra_tokens=st.integers(min_value=1, max_value=1500),
    gap_s=st.floats(0.5, 5.0),
    name=st.sampled_from(["aggregated x1", "1P1D"]),
)
def test_a_cached_prefix_never_predicts_a_slower_first_token(
    prefix_blocks: int, extra_tokens: int, gap_s: float, name: str
) -> None:
    """A conversation's second turn repeats its first prompt and adds to it: with the first
    turn's KV cached it reaches its first token no later than the same prompt sent cold."""
    first_tokens = prefix_blocks * BLOCK
    first = SimRequest("a", "all", 0.0, first_tokens, 2, tuple(range(prefix_blocks)))
    total = first_tokens + extra_tokens
    tail = tuple(range(10_000, 10_000 + total // BLOCK - prefix_blocks))
    warm = SimRequest("b", "all", gap_s, total, 2, (*first.block_hashes, *tail))
    cold = SimRequest("b", "all", gap_s, total, 2, tuple(range(20_000, 20_000 + total // BLOCK)))
    lay = LAYOUTS[name]
    hit = Simulation(lay, PROFILE).run([first, warm]).results[1]
    miss = Simulation(lay, PROFILE).run([first, cold]).results[1]
    assert (hit.cached_tokens, miss.cached_tokens) == (first_tokens, 0)
    assert hit.ttft_s is not None and miss.ttft_s is not None
    assert hit.ttft_s <= miss.ttft_s + 1e-9
