"""The simulator against recorded measurements of this machine (fixtures/: the profile
`pdserve profile --sim-profile` fitted, and `pdserve bench --deployments` reports of the mixed
workload on aggregated, 1P1D and 2P1D; bench/RESULTS.md "Simulator against measurements").

What it keeps: decode ITL p50 within 15 % for every deployment and request class (the
issue's bound), throughput within 5 %, and the aggregated-vs-1P1D ITL p99 ordering the
measurement shows. What it does not reach yet, and so does not assert: TTFT p50 within 15 %
and p99 within 30 % (short-request TTFT medians are predicted 30-45 % low and TTFT p99 2-9x
low: the model leaves out the host CPU the engines share with the serving layer here)."""

from __future__ import annotations

import pathlib

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import BenchReport
from pdserve.config import load_config
from pdserve.sim.layout import layout_from_config
from pdserve.sim.predict import Prediction, compare, predict
from pdserve.sim.profile import SimProfile

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
ROOT = pathlib.Path(__file__).resolve().parents[3]
CONFIGS = {
    "aggregated": "local-aggregated.yaml",
    "1p1d": "local.yaml",
    "2p1d": "local-2p1d.yaml",
}
REPORTS = {"aggregated-vs-1p1d.json": ("aggregated", "1p1d"), "mixed-2p1d.json": ("2p1d",)}


def _run(report_name: str) -> tuple[BenchReport, list[Prediction]]:
    report = BenchReport.model_validate_json((FIXTURES / report_name).read_text())
    workload = BenchConfig.model_validate({**report.config, "deployments": (), "json_path": None})
    profile = SimProfile.load(FIXTURES / "sim-profile-local.json")
    predictions = [
        predict(
            name,
            layout_from_config(load_config(ROOT / "deploy" / CONFIGS[name]), name=name),
            profile,
            workload,
        )
        for name in REPORTS[report_name]
    ]
    return report, predictions


@pytest.mark.parametrize("report_name", sorted(REPORTS))
def test_itl_medians_and_throughput_match_the_measurement(report_name: str) -> None:
    report, predictions = _run(report_name)
    rows = compare(predictions, report)
    assert {r.deployment for r in rows} == set(REPORTS[report_name])
    itl = [r for r in rows if r.field == "itl_p50_s"]
    assert len(itl) == 3 * len(predictions)  # all, short, long
    for r in itl:
        assert r.ratio == pytest.approx(1.0, abs=0.15), r
    for r in (r for r in rows if r.field == "requests_per_s"):
        assert r.ratio == pytest.approx(1.0, abs=0.05), r


def test_disaggregation_smooths_the_itl_tail_as_measured() -> None:
    report, (aggregated, one_p_one_d) = _run("aggregated-vs-1p1d.json")
    measured = report.policies["1p1d"].itl_p99_s, report.policies["aggregated"].itl_p99_s
    predicted = one_p_one_d.metrics.itl_p99_s, aggregated.metrics.itl_p99_s
    assert None not in measured and None not in predicted
    assert measured[0] < measured[1] and predicted[0] < predicted[1]
