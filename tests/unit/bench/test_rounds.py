"""A run's rounds, one by one (pure): each round's percentile of a deployment, and whether
one prediction can be within a bound of every round."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import BenchReport, PolicyReport, RequestRecord
from pdserve.bench.rounds import one_value_holds_all, round_values, spread
from pdserve.config import load_config
from pdserve.sim.bounds import P50_TOLERANCE, rounds_hold, within
from pdserve.sim.layout import layout_from_config
from pdserve.sim.predict import compare, predict
from pdserve.sim.profile import SimProfile
from pdserve.sim.render import rounds_summary
from tests.unit.bench.report_records import policy_report, record

FIXTURES = pathlib.Path(__file__).parents[1] / "sim" / "fixtures"
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


def test_one_value_holds_both_rounds_only_within_the_bound_s_ratio() -> None:
    """+-15 %: 1.15 / 0.85 = 1.353 is the widest pair one value can sit within 15 % of."""
    assert one_value_holds_all([1.0, 1.35], 0.15)
    assert not one_value_holds_all([1.0, 1.36], 0.15)
    assert one_value_holds_all([1.0, 1.8], 0.30)  # 1.3 / 0.7 = 1.857
    assert not one_value_holds_all([1.0, 1.9], 0.30)
    assert one_value_holds_all([], 0.15) and one_value_holds_all([2.0], 0.0)
    with pytest.raises(ValueError, match="tolerance"):
        one_value_holds_all([1.0], 1.0)
    assert spread([2.0, 3.0, 1.0]) == pytest.approx(3.0) and spread([1.0]) is None


def test_a_recorded_run_s_rounds_are_compared_and_summarised() -> None:
    """Run K (2 rounds of 300 per deployment): every bounded row carries both rounds; 1P1D's
    long TTFT p99 moved 1.94x between its rounds, more than a 30 % bound lets one prediction
    cover, and the summary names that cell."""
    report = BenchReport.model_validate_json((FIXTURES / "mixed-3way-600-run-k.json").read_text())
    workload = BenchConfig.model_validate({**report.config, "deployments": (), "json_path": None})
    layout = layout_from_config(load_config(ROOT / "deploy" / "local.yaml"), name="1p1d")
    profile = SimProfile.load(FIXTURES / "sim-profile-local-k.json")
    rows = compare([predict("1p1d", layout, profile, workload, runs=1)], report)
    bounded = [r for r in rows if within(r) is not None]
    assert bounded and all(r.rounds is not None and len(r.rounds) == 2 for r in bounded)
    apart = {(r.scope, r.field) for r in rows if rounds_hold(r) is False}
    assert apart == {("long", "ttft_p99_s")}
    lines = rounds_summary(rows)
    assert lines[0].startswith("TPOT p50 by round: 1p1d ")
    assert "1p1d long TTFT p99" in lines[1] and "1 of " in lines[1]
    p50 = next(r for r in rows if r.scope == "short" and r.field == "ttft_p50_s")
    assert P50_TOLERANCE == 0.15 and rounds_hold(p50) is True
