"""`predict` pools several simulated runs of one workload (different jitter draws)."""

from __future__ import annotations

import pathlib

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.config import load_config
from pdserve.sim.layout import layout_from_config
from pdserve.sim.predict import default_runs, predict
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
