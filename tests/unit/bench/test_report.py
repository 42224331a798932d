"""Report building: metrics, goodput, classes, agent totals, ratios, JSON fields (pure)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.models import CacheBreakRecord, PhaseOutcome, PromptCostRecord, RequestResult
from pdserve.bench.prompts import Calibration
from pdserve.bench.render import parts_table, ratios_table, steps_table
from pdserve.bench.report import BenchReport, build_metrics, is_good
from pdserve.bench.report_build import build_report, compute_ratios


def _result(i: int, **kw: Any) -> RequestResult:
    base: dict[str, Any] = dict(
        index=i, request_class="short", start_s=0.0, e2e_s=1.0, ttft_s=0.1, chunk_gaps_s=(0.1,),
        prompt_tokens=100, completion_tokens=10, cached_tokens=0, text="x",
    )  # fmt: skip
    base.update(kw)
    return RequestResult(**base)


def test_tpot() -> None:
    assert _result(0, e2e_s=1.0, ttft_s=0.1, completion_tokens=10).tpot_s == pytest.approx(0.1)
    assert _result(0, completion_tokens=1).tpot_s is None


@pytest.mark.parametrize(
    ("kw", "good"),
    [
        ({}, True),
        ({"ttft_s": 2.5}, False),  # TTFT SLO 2 s missed
        ({"e2e_s": 6.0, "ttft_s": 0.1}, False),  # TPOT (6 - 0.1) / 9 > 0.5 s
        ({"completion_tokens": 1, "e2e_s": 9.0}, True),  # no TPOT to miss
        ({"error": "HTTP 500"}, False),
    ],
)
def test_goodput_per_request(kw: dict[str, Any], good: bool) -> None:
    assert is_good(_result(0, **kw), BenchConfig()) is good


def test_metrics() -> None:
    results = [_result(i, ttft_s=0.1 * (i + 1), chunk_gaps_s=(0.01, 0.02)) for i in range(10)]
    results.append(_result(10, error="HTTP 400: too long", status=400, ttft_s=None))
    m = build_metrics(results, wall_s=2.0, cfg=BenchConfig())
    assert (m.num_requests, m.num_errors) == (11, 1)
    assert m.ttft_p50_s == pytest.approx(0.55)
    assert m.ttft_p99_s == pytest.approx(0.991)
    assert m.itl_p99_s == pytest.approx(0.02)
    assert m.tpot_p50_s == pytest.approx((1.0 - 0.55) / 9)
    assert m.requests_per_s == pytest.approx(5.0)  # completed requests / wall time
    assert m.output_tokens_per_s == pytest.approx(50.0)
    assert m.goodput_fraction == pytest.approx(10 / 11)


def test_metrics_without_successes_are_none_not_zero() -> None:
    m = build_metrics([_result(0, error="boom")], wall_s=1.0, cfg=BenchConfig())
    assert m.ttft_p50_s is None and m.e2e_p99_s is None and m.goodput_fraction == 0.0


def _mixed_phase(policy: str, ttft_scale: float, round_index: int = 0) -> PhaseOutcome:
    results = [
        _result(i, request_class="long" if i % 2 else "short", ttft_s=ttft_scale * (1 + i % 2))
        for i in range(8)
    ]
    return PhaseOutcome(policy, round_index, tuple(results), wall_s=2.0)


REQUIRED_POLICY_FIELDS = (
    "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "itl_p99_s", "tpot_p50_s", "e2e_p50_s",
    "e2e_p99_s", "requests_per_s", "num_requests", "num_errors", "goodput_fraction",
)  # fmt: skip


def test_mixed_compare_report_json() -> None:
    cfg = BenchConfig(workload="mixed", policies=("round_robin", "pdserve"), rounds=2)
    phases = [
        _mixed_phase("round_robin", 0.2, 0),
        _mixed_phase("pdserve", 0.1, 0),
        _mixed_phase("round_robin", 0.2, 1),
        _mixed_phase("pdserve", 0.1, 1),
    ]
    report = build_report(cfg, "m", Calibration(1.2, 3.0), phases, interrupted=False)
    data = json.loads(report.model_dump_json())
    assert data["workload"] == "mixed" and data["url"] == cfg.url
    assert data["config"]["policies"] == ["round_robin", "pdserve"]
    assert list(data["policies"]) == ["round_robin", "pdserve"]
    for policy in data["policies"].values():
        for field in REQUIRED_POLICY_FIELDS:
            assert field in policy
        assert set(policy["classes"]) == {"short", "long"}
        for cls in policy["classes"].values():
            assert {"ttft_p50_s", "ttft_p90_s", "ttft_p99_s"} <= set(cls)
    rr = data["policies"]["round_robin"]
    assert rr["num_requests"] == 16 and rr["wall_s"] == 4.0  # pooled over two rounds
    assert rr["classes"]["long"]["ttft_p50_s"] == pytest.approx(0.4)
    ratios = data["ratios"]["pdserve/round_robin"]
    assert ratios["ttft_p99_s"] == pytest.approx(0.5)
    assert ratios["requests_per_s"] == pytest.approx(1.0)
    assert ratios["classes"]["short"]["ttft_p50_s"] == pytest.approx(0.5)


def test_every_request_of_every_round_is_kept_in_order() -> None:
    cfg = BenchConfig(workload="mixed", policies=("round_robin", "pdserve"), rounds=2)
    phases = [_mixed_phase(p, 0.1 * (k + 1), k) for k in (0, 1) for p in cfg.policies]
    phases.append(
        PhaseOutcome("pdserve", 2, (_result(0, error="boom", ttft_s=None, status=500),), 1.0)
    )
    phases[1] = PhaseOutcome(
        "pdserve", 0, (_result(0, stages=(("router_queue", 0.002), ("decode", 0.5))),), 1.0
    )
    report = BenchReport.model_validate_json(
        build_report(cfg, "m", None, phases, interrupted=False).model_dump_json()
    )
    rr = report.policies["round_robin"].requests or []
    assert [(r.round_index, r.request_class) for r in rr] == [
        (k, "long" if i % 2 else "short") for k in (0, 1) for i in range(8)
    ]
    assert [r.ttft_s for r in rr[8:10]] == pytest.approx([0.2, 0.4])
    pd = report.policies["pdserve"].requests or []
    assert [r.round_index for r in pd] == [0] + [1] * 8 + [2]
    assert pd[0].stages == {"router_queue": 0.002, "decode": 0.5}
    assert pd[0].chunk_gaps_s == [0.1] and pd[0].prompt_tokens == 100
    assert pd[-1].error == "boom" and pd[-1].ttft_s is None


def test_single_policy_uses_default_key_and_no_ratios() -> None:
    report = build_report(BenchConfig(), "m", None, [_mixed_phase("default", 0.1)], False)
    assert list(report.policies) == ["default"] and report.ratios == {}


def _agent_phase(policy: str, cached: list[int]) -> PhaseOutcome:
    """2 agents x 3 steps; prompts 500, 950, 1400 tokens."""
    results = [
        _result(
            a * 3 + s,
            request_class="agent",
            agent=a,
            step=s,
            prompt_tokens=500 + 450 * s,
            cached_tokens=cached[s],
            ttft_s=0.1 * (s + 1),
            e2e_s=1.0,
        )
        for a in range(2)
        for s in range(3)
    ]
    return PhaseOutcome(policy, 0, tuple(results), wall_s=3.0)


def test_agent_totals_and_steps() -> None:
    cfg = BenchConfig(workload="agent", policies=("a", "b"))
    phases = [_agent_phase("a", [0, 0, 0]), _agent_phase("b", [0, 448, 896])]
    data = json.loads(build_report(cfg, "m", None, phases, False).model_dump_json())
    a, b = data["policies"]["a"], data["policies"]["b"]
    assert a["prompt_tokens_total"] == 2 * (500 + 950 + 1400)
    assert a["final_context_tokens_total"] == 2 * 1400
    assert a["prefilled_tokens_total"] == a["prompt_tokens_total"]
    assert b["cached_tokens_total"] == 2 * (448 + 896)
    assert b["prefilled_tokens_total"] == 5700 - 2688
    steps = b["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert steps[1] == {
        "step": 1, "num_requests": 2, "prompt_tokens_mean": 950.0, "cached_tokens_mean": 448.0,
        "prefill_s_mean": pytest.approx(0.2), "decode_s_mean": pytest.approx(0.8),
        "parts": None, "num_cache_breaks": None, "cache_break_at": None,
        "lost_tokens_mean": None,
    }  # fmt: skip
    assert data["ratios"]["b/a"]["prefilled_tokens_total"] == pytest.approx(3012 / 5700)
    runs = b["agent_runs"]
    assert [(r["agent"], len(r["steps"])) for r in runs] == [(0, 3), (1, 3)]
    assert runs[0]["steps"][2] == {
        "step": 2, "prompt_tokens": 1400, "cached_tokens": 896, "messages": None,
        "cache_break": None,
    }  # fmt: skip


def _costed(step: int, broke: bool) -> PromptCostRecord:
    """Step `step` of a loop: system 300 tokens, task 100, then 200 per step; the cache
    holds everything before this step's new messages (or, after a break, nothing)."""
    sizes = [("system", 300), ("user", 100)] + [("assistant", 50), ("tool", 150)] * step
    cached_upto = 0 if broke else 400 + 200 * (step - 1) if step else 0
    messages, pos = [], 0
    for i, (role, n) in enumerate(sizes):
        cached = max(0, min(n, cached_upto - pos))
        messages.append((i, role, cached, n - cached))
        pos += n
    parts: dict[str, list[int]] = {}
    for _, role, cached, computed in messages:
        acc = parts.setdefault(role, [0, 0])
        acc[0] += cached
        acc[1] += computed
    brk = CacheBreakRecord(5, 0, "system", "system", 600) if broke else None
    return PromptCostRecord(
        parts=tuple((p, c, u) for p, (c, u) in parts.items()),
        messages=tuple(messages),
        cache_break=brk,
    )


def test_agent_steps_report_tokens_by_part_and_cache_breaks() -> None:
    cfg = BenchConfig(workload="agent")
    results = [
        _result(
            a * 3 + s, request_class="agent", agent=a, step=s, prompt_tokens=400 + 200 * s,
            cached_tokens=0, ttft_s=0.1, e2e_s=1.0, prompt_cost=_costed(s, broke=a == 1 and s > 0),
        )
        for a in range(2)
        for s in range(3)
    ]  # fmt: skip
    report = build_report(cfg, "m", None, [PhaseOutcome("default", 0, tuple(results), 3.0)], False)
    policy = report.policies["default"]
    steps = policy.steps or []
    assert steps[0].num_cache_breaks == 0 and steps[0].cache_break_at == []
    assert steps[2].num_cache_breaks == 1 and steps[2].cache_break_at == ["message 0 (system)"]
    assert steps[2].lost_tokens_mean == 600
    parts = steps[2].parts or {}
    # Agent 0 cached its first 600 tokens, agent 1 (broken) none: means over both.
    assert (parts["system"].cached_mean, parts["system"].computed_mean) == (150, 150)
    assert (parts["tool"].cached_mean, parts["tool"].computed_mean) == (75, 225)
    runs = policy.agent_runs or []
    last = runs[1].steps[2]
    assert last.messages is not None and [m["tokens"] for m in last.messages] == [
        300, 100, 50, 150, 50, 150,
    ]  # fmt: skip
    assert last.cache_break is not None and last.cache_break["lost_tokens"] == 600
    table = parts_table("default", policy)
    assert table is not None and [c.header for c in table.columns] == [
        "Step", "system", "user", "assistant", "tool",
    ]  # fmt: skip
    assert "Cache breaks" in [c.header for c in steps_table("default", policy).columns]


def test_ratios_with_three_policies_use_the_first_as_base() -> None:
    cfg = BenchConfig(policies=("a", "b", "c"))
    phases = [_mixed_phase("a", 0.2), _mixed_phase("b", 0.1), _mixed_phase("c", 0.4)]
    report = build_report(cfg, "m", None, phases, False)
    ratios = compute_ratios(report.policies)
    assert list(ratios) == ["b/a", "c/a"]
    assert ratios["c/a"]["ttft_p50_s"] == pytest.approx(2.0)


def test_errors_are_grouped() -> None:
    results = [_result(i, error="HTTP 400: too long", status=400) for i in range(3)]
    report = build_report(
        BenchConfig(), "m", None, [PhaseOutcome("default", 0, tuple(results), 1.0)], False
    )
    errors = report.policies["default"].errors
    assert [(e.message, e.status, e.count) for e in errors] == [("HTTP 400: too long", 400, 3)]


def test_deployments_report_has_a_column_and_ratios_per_deployment(
    tmp_path: pathlib.Path,
) -> None:
    for name in ("agg.yaml", "pd.yaml"):
        (tmp_path / name).write_text("{}\n")
    cfg = BenchConfig(
        workload="mixed",
        deployments=(f"aggregated={tmp_path / 'agg.yaml'}", f"1p1d={tmp_path / 'pd.yaml'}"),
        rounds=2,
    )
    assert cfg.phase_names == ("aggregated", "1p1d")
    phases = [
        _mixed_phase("aggregated", 0.4, 0),
        _mixed_phase("1p1d", 0.1, 0),
        _mixed_phase("aggregated", 0.4, 1),
        _mixed_phase("1p1d", 0.1, 1),
    ]
    report = build_report(cfg, "m", None, phases, interrupted=False)
    assert list(report.policies) == ["aggregated", "1p1d"]
    assert report.policies["1p1d"].num_phases == 2
    assert report.url.startswith("aggregated=") and "1p1d=" in report.url
    ratios = report.ratios["1p1d/aggregated"]
    assert ratios["ttft_p99_s"] == pytest.approx(0.25)
    assert ratios["classes"]["short"]["ttft_p99_s"] == pytest.approx(0.25)
    assert "itl_p99_s" in ratios


@pytest.mark.parametrize(
    ("deployments", "policies", "fragment"),
    [
        (("aggregated",), (), "NAME=CONFIG"),
        (("a=/nonexistent/a.yaml",), (), "no config file"),
        (("a={f}", "a={f}"), (), "distinct"),
        (("a={f}",), ("pdserve",), "cannot be combined"),
    ],
)
def test_bad_deployments_options_say_what_to_fix(
    tmp_path: pathlib.Path, deployments: tuple[str, ...], policies: tuple[str, ...], fragment: str
) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("{}\n")
    with pytest.raises(ValueError, match=fragment):
        BenchConfig(deployments=tuple(d.format(f=f) for d in deployments), policies=policies)


def test_timeline_stages_are_summarized_in_path_order_per_class() -> None:
    from pdserve.bench.render import stages_table

    remote = (("router_queue", 0.001), ("prefill", 0.2), ("kv_transfer", 0.01), ("decode", 0.3))
    local = (("router_queue", 0.002), ("kv_transfer", 0.0), ("decode", 0.3))
    results = [
        _result(0, request_class="long", stages=tuple(reversed(remote))),
        _result(1, request_class="short", stages=local),
        _result(2, request_class="short", stages=local, error="HTTP 500"),
    ]
    cfg = BenchConfig(workload="mixed")
    report = build_report(cfg, "m", None, [PhaseOutcome("default", 0, tuple(results), 1.0)], False)
    stages = report.policies["default"].stages
    assert stages is not None
    assert list(stages) == ["router_queue", "prefill", "kv_transfer", "decode", "client_overhead"]
    # Client TTFT 0.1 s each: the long's 0.211 s of router stages floor it at 0; the short's
    # 0.002 s leave 0.098 s outside the router.
    assert stages["client_overhead"].p50_s == pytest.approx((0.0 + 0.098) / 2)
    assert stages["prefill"].num_requests == 1  # the local prefill has no prefill stage
    assert stages["router_queue"].num_requests == 2  # the failed request is left out
    classes = report.policies["default"].classes or {}
    short = classes["short"].stages
    assert short is not None and "prefill" not in short
    table = stages_table(report)
    assert table is not None and table.row_count == 5
    plain = build_report(cfg, "m", None, [PhaseOutcome("default", 0, (_result(0),), 1.0)], False)
    assert plain.policies["default"].stages is None and stages_table(plain) is None


def test_ratios_give_each_rounds_own_ratio_beside_the_pooled_one() -> None:
    cfg = BenchConfig(policies=("a", "b"), rounds=2)
    # Round 0: b is twice as slow; round 1: b is half as fast again (its host sped up).
    phases = [
        _mixed_phase("a", 0.1, 0), _mixed_phase("b", 0.2, 0),
        _mixed_phase("a", 0.4, 1), _mixed_phase("b", 0.2, 1),
    ]  # fmt: skip
    report = build_report(cfg, "m", None, phases, interrupted=False)
    rounds = report.ratios["b/a"]["rounds"]
    assert rounds["ttft_p50_s"] == pytest.approx([2.0, 0.5])
    assert rounds["short:ttft_p99_s"] == pytest.approx([2.0, 0.5])
    assert len(rounds["requests_per_s"]) == 2
    table = ratios_table(report)
    assert table is not None
    cells = [str(c) for c in table.columns[1]._cells]
    assert "(0.500–2.00)" in cells[0], cells
