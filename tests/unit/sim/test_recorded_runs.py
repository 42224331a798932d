"""The simulator against the latest recorded run of each workload `pdserve sim-check` knows
(bench/results/simulator.json: aggregated, 1P1D and 2P1D measured side by side, and the idle
profile measured beside them), with stated tolerances.

A regression guard, not a fit: the tolerances are what the engines-only simulator (no
cpu_host block) got on the first recorded run of a shared CPU host (bench/RESULTS.md,
"Simulator": clear TTFT p50 effects within 10 %, median error x1.13), with room for the next
run's spread. A model change that loses the clear effects fails here; so does a new recorded
run the model no longer predicts this well (then the page's finding changes: write it down,
do not tune the model to one run).

Stated tolerances, per workload, on the ratios layout ÷ aggregated of the same run:
- where the measured TTFT p50 of a request class differs from aggregated's by more than
  CLEAR, the predicted ratio says which way and is within P50_ERROR of the measured one;
- no TTFT p50 ratio is predicted the opposite way of the measurement;
- over all ratio cells (TTFT p50, p99 per class, ITL p99), the median error is within
  MEDIAN_ERROR.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import statistics
from typing import Any

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import BenchReport
from pdserve.bench.trace import load_trace
from pdserve.router.policy.cost_model import CostModel
from pdserve.sim.check import RatioRow, direction, ratio_rows
from pdserve.sim.layout import SimLayout
from pdserve.sim.predict import predict
from pdserve.sim.profile import SimProfile
from tests.unit.sim.helpers import local_layouts

ROOT = pathlib.Path(__file__).resolve().parents[3]
RECORDED = ROOT / "bench" / "results" / "simulator.json"
TRACE = pathlib.Path(__file__).parent / "data" / "mooncake-first-300.jsonl"
CLEAR = 0.20
"""A measured TTFT p50 ratio further than this from 1 is an effect the model must get."""
P50_ERROR = 0.20
"""How far (relative) the predicted ratio of such a clear effect may be from the measured."""
MEDIAN_ERROR = 1.30
"""The median over all cells of predicted ÷ measured ratio, as a factor either way."""


def _runs() -> dict[str, dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads(RECORDED.read_text())["runs"]
    return {run["name"]: run["report"] for run in runs}


RECORDED_COST_MODEL = CostModel(remote_fixed_s=0.0)
"""The router's cost model of every recorded deployment: the defaults of the time, which are
today's without the remote path's fixed cost (remote_fixed_s came later, as did
deploy/local-2p1d.yaml's fitted coefficients)."""


def _as_recorded(layout: SimLayout) -> SimLayout:
    """`layout` as its deployment ran when these runs were recorded, before issue 52: the ITL
    guard off (router.routing.itl_slo_s null: local prefills on the cold-token rule and
    spill-over alone, in the engines' configured chunks) and RECORDED_COST_MODEL."""
    update = {"itl_slo_s": None, "cost_model": RECORDED_COST_MODEL}
    return dataclasses.replace(layout, policy=layout.policy.model_copy(update=update))


def _rows(workload: str) -> list[RatioRow]:
    runs = _runs()
    report = BenchReport.model_validate(runs[workload])
    profile = SimProfile.model_validate(runs["check"]["profiles"]["engines"])
    cfg = BenchConfig.model_validate({**report.config, "deployments": (), "json_path": None})
    records = load_trace(TRACE) if cfg.workload == "trace" else []
    layouts = {n: _as_recorded(lay) for n, lay in local_layouts(*report.policies).items()}
    predicted = {
        "engines": {n: predict(n, lay, profile, cfg, records) for n, lay in layouts.items()}
    }
    return ratio_rows(workload, "aggregated", report.policies, predicted)


@pytest.mark.parametrize("workload", ["mixed", "synthetic", "trace"])
def test_the_simulator_predicts_the_recorded_run_within_its_stated_tolerances(
    workload: str,
) -> None:
    rows = _rows(workload)
    assert rows, f"no ratios for {workload}"
    p50s = [r for r in rows if r.metric == "TTFT p50" and r.measured is not None]
    clear = [r for r in p50s if abs(math.log(r.measured or 1.0)) > math.log1p(CLEAR)]
    for r in clear:
        assert r.same_direction("engines"), r
        assert r.error("engines") == pytest.approx(1.0, abs=P50_ERROR), r
    assert not [r for r in p50s if r.opposite("engines")]
    errors = [abs(math.log(e)) for r in rows if (e := r.error("engines")) is not None]
    assert math.exp(statistics.median(errors)) <= MEDIAN_ERROR, rows


def test_the_recorded_runs_are_the_check_s_workloads_of_one_profile() -> None:
    """Every workload of the check's run is recorded with the three layouts it compared,
    and the trace data here is the trace workload's requests."""
    runs = _runs()
    check = runs["check"]
    assert set(check["workloads"]) == {"mixed", "synthetic", "trace"}
    for workload in check["workloads"]:
        assert set(runs[workload]["policies"]) == {"aggregated", "1p1d", "2p1d"}
    assert runs["trace"]["config"]["max_requests"] == len(load_trace(TRACE))
    assert direction(1.0) == 0
