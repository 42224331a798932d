"""`predict` pools several simulated runs of one workload (with a cpu_host block: different
draws of the host's spreads), and `compare` sets predictions beside a measured report."""

from __future__ import annotations

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.sim.predict import compare, compare_stages, default_runs, predict
from tests.unit.sim.helpers import LOCAL_PROFILE, local_layouts, measured_run

LAYOUT = local_layouts("1p1d")["1p1d"]
PROFILE = LOCAL_PROFILE.with_host_terms(decode_jitter_sigma=1.0, serving_jitter_sigma=0.5)
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


def test_by_default_a_prediction_pools_about_2400_requests_when_the_host_spreads() -> None:
    got = [default_runs(n) for n in (1, 200, 300, 400, 1000, 2400, 10_000)]
    assert got == [8, 8, 8, 6, 3, 1, 1]
    assert predict("1p1d", LAYOUT, PROFILE, WORKLOAD).runs == 8  # 60 requests
    # Without a cpu_host block every run would be the same: one is simulated.
    assert predict("1p1d", LAYOUT, LOCAL_PROFILE, WORKLOAD).runs == 1


def test_predictions_are_compared_per_class_and_stage_with_the_measured_report() -> None:
    """Rows for all requests and each of the report's classes, with the ratio predicted /
    measured; a prediction with the host that made the run is about the run itself."""
    report = measured_run()
    workload = BenchConfig.model_validate({**report.config, "json_path": None})
    exact = predict("1p1d", LAYOUT, LOCAL_PROFILE, workload)
    rows = compare([exact], report)
    assert {r.scope for r in rows} == {"all", "short", "long"}
    tpot = next(r for r in rows if r.scope == "all" and r.field == "tpot_p50_s")
    assert tpot.ratio is not None and tpot.ratio < 1  # the idle engines decode faster
    stages = compare_stages([exact], report)
    prefill = next(r for r in stages if r.scope == "long" and r.stage == "prefill")
    assert prefill.predicted is not None and prefill.measured is not None
    assert {r.deployment for r in rows} == {"1p1d"}  # only deployments both sides have
