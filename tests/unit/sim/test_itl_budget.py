"""The decode engines' ITL budget in the simulator (pdserve/sim/engine.py): on a decode engine
of a disaggregated deployment with router.routing.itl_slo_s set, each step's prompt chunk is
what pdserve.engine.itl_scheduler gives vLLM (`chunk_tokens` of the ITL guard, split between
the prompts, at least min_prefill_chunk_tokens, at most the configured chunk), sized with the
router's cost model while the step still takes the profile's time; without it the configured
chunks."""

from __future__ import annotations

import pytest

from pdserve.config import load_config
from pdserve.engine.args import engine_args
from pdserve.itl_budget import ItlSettings, chunk_tokens
from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.cost_model import CostModel
from pdserve.sim.engine import Seq, SimEngine
from pdserve.sim.layout import layout_from_config
from pdserve.sim.simulator import Simulation, decode_itl_budget
from tests.unit.sim.helpers import BLOCK, COST, PROFILE, ROOT, layout, limits, request

BUDGET_S = 0.03
ROUTER_COST = COST.model_copy(update={"per_token_sq_s": 1e-8})
"""The router's cost model: with an attention term (COST, the engine's, has none), so a chunk
shrinks as the prompt's computed tokens grow, and the test sees which model sized it."""
CHUNK = 512
STREAMS = 5


def _settings(budget_s: float, cost: CostModel = ROUTER_COST) -> ItlSettings:
    """The decode engine's ITL settings (pdserve.engine.args's): `budget_s`, the smallest
    chunk 16 tokens, `cost`'s coefficients."""
    fields = ("per_token_s", "per_token_sq_s", "decode_base_s", "decode_per_seq_s")
    return ItlSettings(
        itl_slo_s=budget_s,
        min_chunk_tokens=16,
        decode_per_context_token_s=cost.decode_per_context_token_s,
        **{f: getattr(cost, f) for f in fields},
    )


def _no_cache(_hashes: tuple[int, ...]) -> int:
    return 0


def _engine(itl: ItlSettings | None, streams: int = STREAMS) -> SimEngine:
    """A decode engine (chunk cap CHUNK) whose first step admitted `streams` decoding
    requests (their KV arrived by transfer), with nothing else to do."""
    engine = SimEngine("d0", limits(chunk=CHUNK), COST, itl=itl)
    for i in range(streams):
        engine.submit(Seq(f"s{i}", 100, 10**6, 0, (), computed=100))
    if streams:
        step = engine.plan(_no_cache)
        assert step is not None and step.prefill_tokens == 0
        engine.finish_step(step, 0.0)
    return engine


def _prompt_chunks(engine: SimEngine, tokens: int) -> list[tuple[int, float]]:
    """Submit a local prompt of `tokens` and run the engine until it is computed: (the
    prompt's tokens, the step's duration) per step."""
    prompt = Seq("local", tokens, 1, 0, ())
    engine.submit(prompt)
    out: list[tuple[int, float]] = []
    while prompt.prefilling:
        step = engine.plan(_no_cache)
        assert step is not None
        out += [(n, step.duration_s) for seq, n in step.work if seq is prompt]
        engine.finish_step(step, 0.0)
    return out


def test_a_long_local_prompt_beside_streams_runs_in_budget_sized_chunks() -> None:
    engine = _engine(_settings(BUDGET_S))
    chunks = _prompt_chunks(engine, 2000)
    computed = 0
    streams_s = COST.est_decode_step_s(STREAMS, 0) - COST.decode_base_s
    for i, (n, duration_s) in enumerate(chunks):
        # The guard's own function, on the router's cost model, after the tokens computed.
        allowed = chunk_tokens(ROUTER_COST, BUDGET_S, STREAMS, computed, 8192)
        assert n == min(2000 - computed, allowed)
        # The step's time is the engine's (the profile's cost model, COST): base, the chunk's
        # tokens, the prompt's fixed cost with its first chunk, the streams.
        fixed_s = COST.fixed_overhead_s - COST.decode_base_s if i == 0 else 0.0
        expected_s = COST.decode_base_s + COST.per_token_s * n + fixed_s + streams_s
        assert duration_s == pytest.approx(expected_s)
        computed += n
    assert computed == 2000
    first = chunk_tokens(ROUTER_COST, BUDGET_S, STREAMS, 0, 8192)
    assert 150 < first < CHUNK  # (0.03 - 0.01) s / 1e-4 s per token, less attention
    assert chunks[0][0] == first and chunks[-2][0] < first  # later chunks attend to more
    assert len(chunks) > 2000 // first


def test_without_the_budget_the_prompt_runs_in_the_configured_chunks() -> None:
    assert [n for n, _ in _prompt_chunks(_engine(None), 2000)] == [512, 512, 512, 464]


def test_without_streams_the_budget_leaves_the_configured_chunks() -> None:
    engine = _engine(_settings(BUDGET_S), streams=0)
    assert [n for n, _ in _prompt_chunks(engine, 2000)] == [512, 512, 512, 464]


def test_a_budget_that_allows_more_than_the_configured_chunk_keeps_the_chunk() -> None:
    engine = _engine(_settings(10.0))
    assert [n for n, _ in _prompt_chunks(engine, 1200)] == [512, 512, 176]


def test_with_no_headroom_a_step_carries_the_smallest_chunk() -> None:
    """30 streams: a decode step alone (0.005 + 30 x 0.001 s) is over the budget."""
    engine = _engine(_settings(BUDGET_S), streams=30)
    assert chunk_tokens(ROUTER_COST, BUDGET_S, 30, 0, 8192) == 0
    assert {n for n, _ in _prompt_chunks(engine, 100)} == {16, 4}


def test_prompts_computed_together_split_the_allowance() -> None:
    engine = _engine(_settings(BUDGET_S))
    a, b = Seq("a", 1000, 1, 0, ()), Seq("b", 1000, 1, 0, ())
    engine.submit(a)
    engine.submit(b)
    step = engine.plan(_no_cache)
    assert step is not None
    allowance = chunk_tokens(ROUTER_COST, BUDGET_S, STREAMS, 0, 8192)
    assert [n for seq, n in step.work if seq.prefilling] == [allowance // 2] * 2


def test_only_decode_engines_of_disaggregated_layouts_with_an_slo_get_the_budget() -> None:
    policy = PolicyConfig(block_size_tokens=BLOCK, itl_slo_s=BUDGET_S, cost_model=ROUTER_COST)
    disaggregated = layout(num_prefill=1, policy=policy)
    assert decode_itl_budget(disaggregated) == _settings(BUDGET_S)
    assert decode_itl_budget(layout(policy=policy)) is None  # aggregated
    off = policy.model_copy(update={"itl_slo_s": None})
    assert decode_itl_budget(layout(num_prefill=1, policy=off)) is None


@pytest.mark.parametrize("config", ["local.yaml", "local-2p1d.yaml", "local-aggregated.yaml"])
def test_the_simulated_decode_engines_get_the_deployed_ones_settings(config: str) -> None:
    """What pdserve.engine.args gives a decode engine of the config (vLLM's additional_config)
    is what the simulator's decode engines size their chunks with."""
    cfg = load_config(ROOT / "deploy" / config)
    deployed = engine_args(cfg, "decode", "/m").get("additional_config")
    simulated = decode_itl_budget(layout_from_config(cfg))
    assert (simulated.to_config() if simulated is not None else None) == deployed
    assert (deployed is None) == cfg.aggregated


def _streams_beside_a_local_prompt(itl_slo_s: float | None) -> tuple[list[float], str | None]:
    """1P1D: a long prompt occupies the prefill engine, four short requests decode on d0 and
    a 2000-token prompt arrives that the cold-token rule keeps local (stall_weight 0: the
    guard keeps only its SLO bound). (The streams' token gaps while it was computed, the
    guard's verdict.) The local prompt's fixed cost is the step base (no extra step
    time beyond the guard's model)."""
    policy = PolicyConfig(
        block_size_tokens=BLOCK,
        local_prefill_max_cold_tokens=3000,
        itl_slo_s=itl_slo_s,
        stall_weight=0.0,
        cost_model=COST,
    )
    profile = PROFILE.model_copy(update={"local_prefill_fixed_s": COST.decode_base_s})
    lay = layout(num_prefill=1, policy=policy)
    requests = [request(0, 8000, out=1)]
    requests += [request(i, 64, out=400, at=0.01 * i) for i in range(1, 5)]
    requests.append(request(5, 2000, out=1, at=0.2))
    results = Simulation(lay, profile).run(requests).results
    long = results[5]
    assert long.decision is not None and long.ttft_s is not None and long.local_prefill
    start, end = long.sent_s, long.sent_s + long.ttft_s
    gaps = []
    for r in results[1:5]:
        t = r.sent_s + (r.ttft_s or 0.0)
        for gap in r.chunk_gaps_s:
            t += gap
            if start < t <= end:
                gaps.append(gap)
    return gaps, long.decision.itl


def test_the_streams_beside_a_local_prompt_stay_within_the_budget() -> None:
    gaps, verdict = _streams_beside_a_local_prompt(BUDGET_S)
    assert verdict == "worth" and len(gaps) > 4 * 5
    assert max(gaps) <= BUDGET_S + 1e-9
    # Guard off: the engine's configured chunk (8192 here) takes the whole prompt in one step.
    off_gaps, off_verdict = _streams_beside_a_local_prompt(None)
    assert off_verdict is None and max(off_gaps) > 5 * BUDGET_S
