"""The simulated workload is the one `pdserve bench` sends: for each workload kind, the same
requests in the same order, with the same prompt and output lengths (after the length limits)
and the same arrival times, compared with the bench's own request plans."""

from __future__ import annotations

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.mixed import build_mixed
from pdserve.bench.prompts import Calibration, PromptFactory
from pdserve.bench.synthetic import build_synthetic
from pdserve.bench.trace import TraceRecord, build_trace
from pdserve.sim.predict import workload_requests

FACTORY = PromptFactory(Calibration(tokens_per_word=1.25, overhead_tokens=3.0), salt="s0")
TRACE = [
    TraceRecord(timestamp_ms=1000.0 + 250 * i, input_length=400 * (i % 7) + 30,
                output_length=10 + 40 * (i % 5), hash_ids=tuple(range(i % 3, i % 3 + 4)))
    for i in range(40)
]  # fmt: skip


def _same(cfg: BenchConfig, bench: list[tuple[int, int, float | None]]) -> None:
    simulated = workload_requests(cfg, 16, TRACE)
    got = [(r.prompt_tokens, r.output_tokens, r.arrival_s) for r in simulated]
    assert got == [(n, out, pytest.approx(at) if at is not None else None) for n, out, at in bench]


@pytest.mark.parametrize("rate", [None, 4.0])
def test_mixed_is_the_bench_s_mixed(rate: float | None) -> None:
    cfg = BenchConfig(workload="mixed", num_requests=30, request_rate=rate, burst_size=3)
    specs = build_mixed(cfg, FACTORY)
    _same(cfg, [(s.target_prompt_tokens, s.max_tokens, s.arrival_s) for s in specs])
    assert [r.request_class for r in workload_requests(cfg, 16)] == [s.request_class for s in specs]


@pytest.mark.parametrize(
    "limits",
    [{}, {"max_input_tokens": 900, "max_output_tokens": 20},
     {"max_input_tokens": 900, "max_output_tokens": 20, "clip_mode": "skip"}],
)  # fmt: skip
def test_synthetic_is_the_bench_s_synthetic_after_its_limits(limits: dict[str, object]) -> None:
    cfg = BenchConfig.model_validate(
        {"workload": "synthetic", "num_requests": 40, "request_rate": 3.0, "seed": 5,
         "input_dist": "uniform:100:2000", "output_dist": "uniform:5:60", **limits}
    )  # fmt: skip
    plan = build_synthetic(cfg, FACTORY)
    _same(cfg, [(s.target_prompt_tokens, s.max_tokens, s.arrival_s) for s in plan.specs])
    if limits.get("clip_mode") == "skip":
        assert plan.num_skipped > 0


@pytest.mark.parametrize(
    "limits",
    [{}, {"max_output_tokens": 64, "max_input_tokens": 1500},
     {"max_output_tokens": 64, "max_input_tokens": 1500, "clip_mode": "skip"}],
)  # fmt: skip
def test_a_trace_is_replayed_as_the_bench_replays_it(limits: dict[str, object]) -> None:
    cfg = BenchConfig.model_validate(
        {"workload": "trace", "trace": "unused.jsonl", "max_requests": 25,
         "trace_length_scale": 0.5, "trace_time_scale": 0.1, **limits}
    )  # fmt: skip
    plan = build_trace(TRACE, cfg, FACTORY)
    _same(cfg, [(s.target_prompt_tokens, s.max_tokens, s.arrival_s) for s in plan.specs])
    # --max-requests counts the requests sent, after those skipped
    assert len(plan.specs) == min(25, len(TRACE) - plan.num_skipped)
