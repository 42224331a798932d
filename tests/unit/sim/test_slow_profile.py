"""An idle profile slower than the run it is fitted on is caught (pure): run P's profile,
taken on a VM minutes after it booted, had engines 1.5-2x slower than they ran in the bench
an hour later; the profile taken after the run had not."""

from __future__ import annotations

import json
import pathlib

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import BenchReport
from pdserve.config import load_config
from pdserve.sim.fit_engine import SLOW_PROFILE_TOLERANCE, idle_steps_slower_than_run
from pdserve.sim.layout import layout_from_config
from pdserve.sim.profile import SimProfile

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
ROOT = pathlib.Path(__file__).resolve().parents[3]
LAYOUT = layout_from_config(load_config(ROOT / "deploy" / "local.yaml"), name="1p1d")


def _run(name: str) -> tuple[BenchConfig, BenchReport]:
    report = BenchReport.model_validate_json((FIXTURES / name).read_text())
    return BenchConfig.model_validate(
        {**report.config, "deployments": (), "json_path": None}
    ), report


def test_run_p_s_profile_before_the_run_is_slower_than_the_run() -> None:
    cfg, report = _run("mixed-3way-600-run-p.json")
    measured = report.policies["1p1d"]
    got = idle_steps_slower_than_run(
        SimProfile.load(FIXTURES / "sim-profile-local-p.json"), LAYOUT, cfg, measured
    )
    assert got is not None
    simulated_s, measured_s = got
    assert measured_s == measured.tpot_p50_s
    assert simulated_s > measured_s * (1 + SLOW_PROFILE_TOLERANCE)
    assert simulated_s == pytest.approx(7.9e-3, rel=0.1)  # 5.4 ms measured


@pytest.mark.parametrize(
    ("profile", "run"),
    [
        ("sim-profile-local-p-after.json", "mixed-3way-600-run-p.json"),
        ("sim-profile-local-k.json", "mixed-3way-600-run-k.json"),
        ("sim-profile-local-i.json", "mixed-3way-600-run-i.json"),
    ],
)
def test_profiles_taken_on_a_settled_host_pass(profile: str, run: str) -> None:
    cfg, report = _run(run)
    prof = SimProfile.load(FIXTURES / profile)
    assert idle_steps_slower_than_run(prof, LAYOUT, cfg, report.policies["1p1d"]) is None


def test_a_run_without_tpot_is_not_judged() -> None:
    cfg, report = _run("mixed-3way-600-run-p.json")
    measured = report.policies["1p1d"].model_copy(update={"tpot_p50_s": None})
    prof = SimProfile.load(FIXTURES / "sim-profile-local-p.json")
    assert idle_steps_slower_than_run(prof, LAYOUT, cfg, measured) is None


def test_the_simulate_command_warns_and_prints_the_rounds(tmp_path: pathlib.Path) -> None:
    """`pdserve simulate --fit-host-on` with run P's slow profile says to profile again, still
    fits, and prints run P's rounds: its TPOT p50 per round and the cells whose rounds are
    further apart than the bound (aggregated's and 1P1D's short TTFT p50)."""
    from typer.testing import CliRunner

    from pdserve.cli import app

    report = tmp_path / "measured.json"
    doc = BenchReport.model_validate_json((FIXTURES / "mixed-3way-600-run-p.json").read_text())
    doc.config["deployments"] = [f"{n}={ROOT / 'deploy' / p}" for n, p in CONFIGS.items()]
    report.write_text(doc.model_dump_json())
    args = ["simulate", "--profile", str(FIXTURES / "sim-profile-local-p.json")]
    args += ["--measured", str(report), "--fit-host-on", "1p1d", "--json", str(tmp_path / "o.json")]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "warning: the run decoded faster than this profile's idle engines" in text
    assert "(TPOT p50 5.43 ms measured on 1p1d" in text
    assert "host contention fitted on 1p1d" in text
    assert "TPOT p50 by round: aggregated 7.66 / 6.41 ms" in text
    assert "(aggregated short TTFT p50, 1p1d short TTFT p50)" in text
    rows = json.loads((tmp_path / "o.json").read_text())["compared"]
    apart = {
        (r["deployment"], r["requests"], r["field"])
        for r in rows
        if r["rounds_within_one_bound"] is False
    }
    assert apart == {("aggregated", "short", "ttft_p50_s"), ("1p1d", "short", "ttft_p50_s")}
    assert all(len(r["measured_rounds"]) == 2 for r in rows if r["within_bound"] is not None)


CONFIGS = {"aggregated": "local-aggregated.yaml", "1p1d": "local.yaml", "2p1d": "local-2p1d.yaml"}
