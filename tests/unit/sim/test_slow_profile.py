"""An idle profile slower than the run it is fitted on is caught (pure): run P's profile,
taken on a VM minutes after it booted, had engines 1.5-2x slower than they ran in the bench
an hour later; the profile taken after the run had not."""

from __future__ import annotations

import pathlib

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import BenchReport
from pdserve.config import load_config
from pdserve.sim.fit import SLOW_PROFILE_TOLERANCE, idle_steps_slower_than_run
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
