"""The report pages opened in Debian's headless Chromium, as a person would look at them: every
chart has a size on screen, the CDFs carry each series' p50/p99 markers, the console has no
error, and a screenshot is left in the test artifacts. The reports come from the commands
themselves (`pdserve report render`, `simulate --measured --report`; `sim-check --report` in
tests/unit/sim/test_check.py)
over synthetic or simulated runs; a real cluster run's report is looked at in
tests/integration/test_report.py and the fault tests."""

from __future__ import annotations

import json
import pathlib

from typer.testing import CliRunner

from pdserve.cli import app
from pdserve.report.browser import Look, look
from tests.artifacts import ROOT, artifact
from tests.unit.report.runs import elastic_doc, overload_run, synthetic_run
from tests.unit.sim.helpers import LOCAL_CONFIGS, LOCAL_PROFILE, write_run

RENDER_LIMIT_S = 10.0


def _render(document: pathlib.Path, out: pathlib.Path, *extra: str) -> pathlib.Path:
    result = CliRunner().invoke(app, ["report", "render", str(document), "--out", str(out), *extra])
    assert result.exit_code == 0, result.output
    return out / "index.html"


def _clean(seen: Look) -> None:
    assert seen.problems == [], seen.problems
    assert seen.console_errors == []
    assert seen.rendered_s < RENDER_LIMIT_S


def test_a_deployments_report_shows_each_layouts_cdfs(tmp_path: pathlib.Path) -> None:
    names = ("aggregated", "1p1d", "2p1d")
    saved = tmp_path / "layouts.json"
    saved.write_text(synthetic_run(names, 40, deployments=True, rounds=2).model_dump_json())
    seen = look(_render(saved, tmp_path / "r"), artifact("report-deployments.png"))
    _clean(seen)
    assert seen.kind == "bench"
    for key in ("ttft-cdf-all", "itl-cdf-all", "ttft-cdf-short", "ttft-cdf-long"):
        chart = seen.charts[key]
        assert (chart.p50_markers, chart.p99_markers) == (3, 3), key
        assert all(f"{n}: p50" in chart.text for n in names)
    assert {"timeline-aggregated", "timeline-2p1d", "throughput-over-time"} <= set(seen.charts)
    assert seen.screenshot is not None and seen.screenshot.stat().st_size > 20_000


def test_a_thousand_request_run_stays_small_and_renders_fast(tmp_path: pathlib.Path) -> None:
    saved = tmp_path / "big.json"
    report = synthetic_run(("round_robin", "pdserve"), 500)
    assert sum(p.num_requests for p in report.policies.values()) == 1000
    saved.write_text(report.model_dump_json())
    html = _render(saved, tmp_path / "r")
    assert html.stat().st_size < 5_000_000
    seen = look(html, artifact("report-1000-requests.png"))
    _clean(seen)
    assert seen.charts["itl-cdf-all"].p99_markers == 2


def test_a_prediction_report_puts_predicted_beside_measured(tmp_path: pathlib.Path) -> None:
    measured = write_run(tmp_path)
    profile = tmp_path / "profile.json"
    profile.write_text(LOCAL_PROFILE.model_dump_json())
    out = tmp_path / "r"
    args = ["simulate", "--profile", str(profile), "--measured", str(measured), "--runs", "1"]
    result = CliRunner().invoke(app, [*args, "--report", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    seen = look(out / "index.html", artifact("report-prediction.png"))
    _clean(seen)
    assert seen.kind == "prediction"
    bars = [c for k, c in seen.charts.items() if k.startswith("predicted-")]
    assert len(bars) >= len(LOCAL_CONFIGS)
    assert all("predicted" in c.text and "measured" in c.text for c in bars)
    assert seen.charts["ttft-cdf-all"].p50_markers == len(LOCAL_CONFIGS)


def test_simulate_report_needs_a_measured_run(tmp_path: pathlib.Path) -> None:
    profile = tmp_path / "profile.json"
    profile.write_text(LOCAL_PROFILE.model_dump_json())
    result = CliRunner().invoke(
        app,
        ["simulate", "--profile", str(profile), "--config", str(ROOT / "deploy" / "local.yaml"),
         "--report", str(tmp_path / "r")],
    )  # fmt: skip
    assert result.exit_code == 2 and "--report needs --measured" in result.output


def test_an_elastic_runs_report_shows_the_scale_events(tmp_path: pathlib.Path) -> None:
    saved = tmp_path / "elastic.json"
    saved.write_text(json.dumps(elastic_doc()))
    seen = look(_render(saved, tmp_path / "r"), artifact("report-elastic.png"))
    _clean(seen)
    assert seen.kind == "elastic"
    assert seen.charts["ttft-over-time"].event_markers == 2
    assert "prefill 1→2" in seen.charts["ttft-over-time"].text


def test_an_overload_report_shows_the_refusals_per_level(tmp_path: pathlib.Path) -> None:
    saved = tmp_path / "overload.json"
    saved.write_text(overload_run().model_dump_json())
    seen = look(_render(saved, tmp_path / "r"), artifact("report-overload.png"))
    _clean(seen)
    assert seen.kind == "overload"
    assert seen.charts["ttft-cdf-levels"].p99_markers == 2
    assert "rejected" in seen.charts["answers-c64"].text
