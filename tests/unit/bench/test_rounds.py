"""A run's rounds, one by one (pure): each round's percentile of a deployment, set beside a
prediction."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import BenchReport, PolicyReport, RequestRecord
from pdserve.bench.rounds import round_values, spread
from pdserve.config import load_config
from pdserve.sim.layout import layout_from_config
from pdserve.sim.predict import compare, predict
from pdserve.sim.profile import SimProfile
from pdserve.sim.render import rounds_summary
from tests.unit.bench.report_records import policy_report, record

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _record(
    round_index: int,
    cls: str,
    ttft: float,
    *,
    gaps: list[float] | None = None,
    error: str | None = None,
) -> RequestRecord:
    """A request of round `round_index` whose stream takes 1 s after its first token."""
    return record(cls, ttft, round_index=round_index, e2e_s=ttft + 1.0, gaps=gaps, error=error)


def _report(records: list[RequestRecord] | None) -> PolicyReport:
    return policy_report(records, num_phases=2)


def test_each_round_s_percentile_is_taken_over_that_round_s_successful_requests() -> None:
    records = [_record(0, "short", 0.010 * (i + 1)) for i in range(101)]  # median 0.51
    records += [_record(1, "short", 0.020 * (i + 1)) for i in range(101)]  # median 1.02
    records += [_record(1, "long", 50.0), _record(0, "short", 99.0, error="boom")]
    report = _report(records)
    assert round_values(report, "short", "ttft_p50_s") == pytest.approx((0.51, 1.02))
    assert round_values(report, "long", "ttft_p50_s") is None  # one round has the class
    everything = round_values(report, None, "ttft_p50_s")
    assert everything is not None and everything[1] == pytest.approx(
        float(np.percentile([0.020 * (i + 1) for i in range(101)] + [50.0], 50))
    )


def test_itl_pools_every_gap_of_the_round_and_tpot_is_per_request() -> None:
    records = [_record(0, "short", 0.1, gaps=[0.04, 0.06]), _record(1, "short", 0.1, gaps=[0.5])]
    report = _report(records)
    assert round_values(report, None, "itl_p50_s") == pytest.approx((0.05, 0.5))
    assert round_values(report, None, "tpot_p50_s") == pytest.approx((0.1, 0.1))  # 1 s / 10


def test_no_kept_requests_one_round_or_a_non_percentile_give_no_rounds() -> None:
    assert round_values(_report(None), None, "ttft_p50_s") is None
    assert round_values(_report([_record(0, "short", 0.1)]), None, "ttft_p50_s") is None
    two = _report([_record(0, "short", 0.1), _record(1, "short", 0.2)])
    assert round_values(two, None, "requests_per_s") is None


def test_the_spread_of_rounds_is_max_over_min_of_the_positive_values() -> None:
    assert spread([2.0, 3.0, 1.0]) == pytest.approx(3.0)
    assert spread([1.0]) is None and spread([0.0, 2.0]) is None


def test_rounds_are_compared_beside_a_prediction_and_summarised() -> None:
    """A two-round report: every percentile row carries both rounds, and the summary names
    each deployment's TPOT p50 per round."""
    cfg = BenchConfig(workload="mixed", num_requests=8, request_rate=4.0)
    layout = layout_from_config(load_config(ROOT / "deploy" / "local.yaml"), name="1p1d")
    records = [_record(0, c, 0.1, gaps=[0.01] * 4) for c in ("short", "long") for _ in range(4)]
    records += [_record(1, c, 0.3, gaps=[0.02] * 4) for c in ("short", "long") for _ in range(4)]
    measured = _report(records)
    report = BenchReport(
        workload="mixed", url="", model="m", config={}, calibration=None,
        policies={"1p1d": measured}, ratios={}, interrupted=False, notes=[],
    )  # fmt: skip
    rows = compare([predict("1p1d", layout, SimProfile(), cfg, runs=1)], report)
    p50 = next(r for r in rows if r.scope == "all" and r.field == "ttft_p50_s")
    assert p50.rounds == pytest.approx((0.1, 0.3))
    lines = rounds_summary(rows)
    assert lines == ["TPOT p50 by round: 1p1d 100.00 / 100.00 ms (x1.00)"]
