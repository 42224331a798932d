"""`predict` pools several simulated runs of one workload (different jitter draws)."""

from __future__ import annotations

import pathlib

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import BenchReport
from pdserve.config import load_config
from pdserve.sim.bounds import within
from pdserve.sim.layout import layout_from_config
from pdserve.sim.predict import compare, default_runs, predict
from pdserve.sim.profile import SimProfile

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
ROOT = pathlib.Path(__file__).resolve().parents[3]
LAYOUT = layout_from_config(load_config(ROOT / "deploy" / "local.yaml"), name="1p1d")
PROFILE = SimProfile.load(FIXTURES / "sim-profile-local.json").model_copy(
    update={"decode_jitter_sigma": 1.0, "serving_jitter_sigma": 0.5}
)
WORKLOAD = BenchConfig(workload="mixed", num_requests=60, request_rate=4.0, concurrency=16)


def test_runs_pool_every_run_s_requests_at_the_same_throughput() -> None:
    one = predict("1p1d", LAYOUT, PROFILE, WORKLOAD, runs=1)
    four = predict("1p1d", LAYOUT, PROFILE, WORKLOAD, runs=4)
    assert one.runs == 1 and four.runs == 4
    assert one.metrics.num_requests == 60 and four.metrics.num_requests == 240
    assert sum(c.num_requests for c in four.classes.values()) == 240
    assert four.metrics.requests_per_s == pytest.approx(one.metrics.requests_per_s, rel=0.05)
    # Other draws: the pooled tail is not the first run's.
    assert four.metrics.ttft_p99_s != one.metrics.ttft_p99_s


def test_runs_must_be_positive() -> None:
    with pytest.raises(ValueError, match="runs must be >= 1"):
        predict("1p1d", LAYOUT, PROFILE, WORKLOAD, runs=0)


def test_by_default_a_prediction_pools_about_2400_requests() -> None:
    assert [default_runs(n) for n in (1, 200, 300, 400, 1000, 2400, 10_000)] == [
        8,
        8,
        8,
        6,
        3,
        1,
        1,
    ]
    assert predict("1p1d", LAYOUT, PROFILE, WORKLOAD).runs == 8  # 60 requests


def test_ttft_over_all_requests_is_not_bounded_when_the_report_has_classes() -> None:
    """A mixed run's TTFT p50 over short and long prompts together falls between the two
    classes; the classes' TTFT rows and every ITL row are the bounded ones."""
    report = BenchReport.model_validate_json((FIXTURES / "mixed-3way-600.json").read_text())
    workload = BenchConfig.model_validate({**report.config, "deployments": (), "json_path": None})
    rows = compare([predict("1p1d", LAYOUT, PROFILE, workload, runs=1)], report)
    unbounded = {(r.scope, r.field) for r in rows if within(r) is None}
    assert ("all", "ttft_p50_s") in unbounded and ("all", "ttft_p99_s") in unbounded
    for scope in ("short", "long"):
        assert (scope, "ttft_p50_s") not in unbounded and (scope, "ttft_p99_s") not in unbounded
    assert ("all", "itl_p99_s") not in unbounded
    flat = report.model_copy(
        update={"policies": {"1p1d": report.policies["1p1d"].model_copy(update={"classes": None})}}
    )
    rows = compare([predict("1p1d", LAYOUT, PROFILE, workload, runs=1)], flat)
    assert all(within(r) is not None for r in rows if r.field == "ttft_p50_s")
