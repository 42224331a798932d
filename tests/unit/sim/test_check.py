"""The ratio/rank check (pdserve/sim/check.py, `pdserve sim-check`): ratios between layouts,
predicted against measured, their direction, the tuner's ordering on both sides, and the
command on runs already in its folder (--reuse: no cluster)."""

from __future__ import annotations

import json
import pathlib

import pytest
from typer.testing import CliRunner

from pdserve.bench.config import BenchConfig
from pdserve.cli import app
from pdserve.report.browser import look
from pdserve.sim.check import RankRow, RatioRow, direction, rank_row, ratio_rows, summarize
from pdserve.sim.predict import Prediction, predict
from tests.artifacts import artifact
from tests.unit.sim.helpers import (
    LOCAL_CONFIGS,
    LOCAL_PROFILE,
    ROOT,
    TRUTH_HOST,
    local_layouts,
    measured_run,
    write_run,
)


def test_direction_is_better_worse_or_within_five_percent() -> None:
    assert [direction(r) for r in (0.5, 0.96, 1.0, 1.04, 1.2)] == [-1, 0, 0, 0, 1]
    assert direction(None) is None and direction(0.0) is None


def test_a_row_says_how_far_and_whether_the_direction_is_right() -> None:
    row = RatioRow("w", "1p1d", "aggregated", "short", "TTFT p50", 0.5, {"a": 0.8, "b": 1.3})
    assert row.error("a") == pytest.approx(1.6) and row.same_direction("a") is True
    assert row.same_direction("b") is False and row.error("missing") is None
    assert row.opposite("b") is True and row.opposite("a") is False
    tie = RatioRow("w", "1p1d", "aggregated", "all", "ITL p99", 0.85, {"a": 0.99})
    assert tie.same_direction("a") is False and tie.opposite("a") is False  # it differs


def _predictions(profile_host: bool) -> dict[str, Prediction]:
    cfg = BenchConfig.model_validate({**measured_run().config, "json_path": None})
    prof = LOCAL_PROFILE.with_host(TRUTH_HOST) if profile_host else LOCAL_PROFILE
    return {n: predict(n, lay, prof, cfg, runs=1) for n, lay in local_layouts().items()}


def test_every_layout_is_set_against_the_baseline_per_class_and_for_the_streams() -> None:
    report = measured_run()
    predicted = {"engines": _predictions(False), "host": _predictions(True)}
    rows = ratio_rows("mixed", "aggregated", report.policies, predicted)
    cells = {(r.layout, r.scope, r.metric) for r in rows}
    assert cells == {
        (layout, scope, metric)
        for layout in ("1p1d", "2p1d")
        for scope, metric in [
            ("short", "TTFT p50"), ("short", "TTFT p99"), ("long", "TTFT p50"),
            ("long", "TTFT p99"), ("all", "ITL p99"),
        ]
    }  # fmt: skip
    row = next(r for r in rows if (r.layout, r.scope, r.metric) == ("1p1d", "long", "TTFT p50"))
    m = report.policies
    assert row.measured == pytest.approx(
        (m["1p1d"].classes or {})["long"].ttft_p50_s
        / (m["aggregated"].classes or {})["long"].ttft_p50_s  # type: ignore[operator]
    )
    # The host that made the run predicts it: its ratios are the measured ones but for the
    # draws of its spreads (one simulated run against the run's own draws).
    summary = summarize("host", rows, [])
    assert summary.median_error is not None and summary.median_error < 1.15


def test_the_tuner_s_order_is_taken_on_both_sides() -> None:
    report = measured_run()
    predicted = {"engines": _predictions(False)}
    devices = {n: lay.num_devices for n, lay in local_layouts().items()}
    row = rank_row("mixed", report.policies, predicted, devices, target_goodput=0.99)
    assert sorted(row.measured) == sorted(report.policies) == sorted(row.predicted["engines"])
    picked = RankRow("w", ("a", "b"), {"p": ("a", "b"), "q": ("b", "a")})
    assert picked.picks_best("p") and not picked.picks_best("q") and not picked.picks_best("x")
    summary = summarize("p", [], [picked, RankRow("v", ("b",), {"p": ("a",)})])
    assert (summary.workloads, summary.best_picked) == (2, 1)


def test_the_command_checks_runs_already_in_its_folder(tmp_path: pathlib.Path) -> None:
    """--reuse with a profile given: no cluster is started; the tables and check.json come
    from the reports in --out."""
    out = tmp_path / "check"
    out.mkdir()
    write_run(tmp_path).rename(out / "mixed.json")
    profile = tmp_path / "profile.json"
    profile.write_text(LOCAL_PROFILE.model_dump_json())
    deployments = ",".join(f"{n}={ROOT / 'deploy' / c}" for n, c in LOCAL_CONFIGS.items())
    args = ["sim-check", "--out", str(out), "--reuse", "--profile", str(profile)]
    args += ["--workloads", "mixed", "--deployments", deployments]
    args += ["--report", str(tmp_path / "report")]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "mixed: " in text and "(reused)" in text
    assert "1p1d ÷ aggregated" in text and "picks best" in text
    assert "engines: direction right in " in text
    doc = json.loads((out / "check.json").read_text())
    assert {r["layout"] for r in doc["ratios"]} == {"1p1d", "2p1d"}
    assert doc["ranks"][0]["workload"] == "mixed" and len(doc["summary"]) == 1
    # Its HTML report, opened in headless Chromium: each layout's ratios, measured and
    # predicted, drawn from the same document.
    seen = look(tmp_path / "report" / "index.html", artifact("report-sim-check.png"))
    assert seen.problems == [] and seen.kind == "prediction"
    ratios = seen.charts["ratios-mixed"]
    assert "1p1d all ITL p99" in ratios.text and "predicted (engines)" in ratios.text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workloads", "agent"], "unknown workloads ['agent']"),
        (["--workloads", "trace"], "the trace workload needs --trace PATH"),
        (["--deployments", "only=deploy/local.yaml"], "needs at least two layouts"),
        (["--deployments", "a=deploy/local.yaml,a=deploy/local.yaml"], "distinct NAME=CONFIG"),
        (
            ["--workloads", "mixed", "--deployments", "a=no.yaml,b=deploy/local.yaml"],
            "config error",
        ),
    ],
)
def test_bad_options_are_refused_before_anything_starts(
    tmp_path: pathlib.Path, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(
        app, ["sim-check", "--out", str(tmp_path / "o"), *args], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "o" / "check.json").exists()
