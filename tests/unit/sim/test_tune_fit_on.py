"""`pdserve tune --fit-on RUN`: fit the profile on a run measured now, then search.

The fit is the one `pdserve simulate --measured RUN --fit-host-on 1p1d --write-profile` writes:
on run AL's two-round pilot, the fit named before run AL that held all 18 cells
(tests/unit/sim/test_run_al.py). It is then checked on the pilot itself: tune says how many of
the pilot's TTFT/ITL cells it holds and warns, naming each, when it misses any (run AM's
pilot). Every misuse is refused with exit status 2 and a message.
"""

from __future__ import annotations

import pathlib

import pytest
from rich.console import Console
from typer.testing import CliRunner

from pdserve.bench.report import BenchReport
from pdserve.cli import app
from pdserve.sim.cli import report_pilot_check
from pdserve.sim.pilot import PilotCheck
from pdserve.sim.predict import ComparedRow
from pdserve.sim.profile import SimProfile
from tests.unit.sim.test_local_intake import FIXTURES, assert_same_fit

ROOT = pathlib.Path(__file__).resolve().parents[3]
PILOT = FIXTURES / "mixed-3way-600-run-al-pilot.json"
IDLE_AL = FIXTURES / "sim-profile-local-al-pooled.json"
PILOT_FIT = FIXTURES / "sim-profile-local-al-pilot-pooled-intake-2026-12-05.json"
PILOT_AM = FIXTURES / "mixed-3way-600-run-am-pilot.json"
AN_PILOTS = [FIXTURES / f"mixed-3way-600-run-an-{p}.json" for p in ("pilot", "pilot2")]
AN_POOLED_FIT = FIXTURES / "sim-profile-local-an-pilots-pooled-intake-posthoc.json"
IDLE_AN = FIXTURES / "sim-profile-local-an-pooled.json"
SMALL_SEARCH = [
    "--config", str(ROOT / "deploy" / "local.yaml"), "--devices", "2", "--no-aggregated",
    "--chunk-tokens", "none", "--local-thresholds", "128", "--runs", "1",
    "--workload", "mixed", "--num-requests", "100", "--target-goodput", "0",
]  # fmt: skip


def _tune(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["tune", "--profile", str(IDLE_AL), *args, *SMALL_SEARCH])
    return result.exit_code, result.output


def test_tune_fits_on_the_run_as_simulate_does_then_recommends(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # the run names its deployments' configs from the repository root
    fitted = tmp_path / "fit.json"
    code, out = _tune("--fit-on", str(PILOT), "--write-profile", str(fitted))
    assert code == 0, out
    # No deployment named: the run's first disaggregated one (1p1d; aggregated comes first).
    assert "fitting the serving layer on 1p1d" in out
    assert "fitted on aggregated's request classes" in out
    assert "recommended:" in out
    assert_same_fit(SimProfile.load(fitted), SimProfile.load(PILOT_FIT))
    # The fit is checked on the pilot itself: run AL's pilot fit held all its cells.
    assert "the fit holds all 30 TTFT/ITL cells of the pilot itself" in out
    assert "warning" not in out


def test_fit_on_warns_when_the_fit_misses_cells_of_its_own_pilot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run AM's pilot caught the host stalling: its fit missed three of the pilot's own 30
    cells, all too high (bench/RESULTS.md, "Run AM"); tune names each and the fitted stalls."""
    monkeypatch.chdir(ROOT)
    code, out = _tune("--fit-on", str(PILOT_AM))
    assert code == 0, out
    text = " ".join(out.split())  # rich wraps long lines
    assert "warning: the fit misses 3 of 30 TTFT/ITL cells of the pilot" in text
    assert "(fitted host stalls: 0.5 per second, median 10 ms)" in text
    assert "Whether such misses foretell misses on the next run is not established" in text
    for cell in ("aggregated long TTFT p50", "1p1d short TTFT p99", "2p1d short TTFT p99"):
        assert cell in text
    assert "holds all" not in text
    assert "recommended:" in text  # a warning, not a refusal


def test_fit_on_names_the_run_s_deployments_when_asked_for_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    code, out = _tune("--fit-on", str(PILOT), "--fit-host-on", "1p2d")
    assert code == 2
    assert "1p2d" in out and "aggregated, 1p1d, 2p1d" in out


def test_fit_on_says_which_config_it_cannot_read(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the run's relative config paths do not resolve here
    code, out = _tune("--fit-on", str(PILOT))
    assert code == 2
    assert "config error" in out and "deploy/local-aggregated.yaml" in out


def test_fit_on_refuses_a_run_that_records_no_deployment_configs(tmp_path: pathlib.Path) -> None:
    report = BenchReport.model_validate_json(PILOT.read_text())
    run = tmp_path / "url-run.json"  # as `pdserve bench --url` writes it: no --deployments
    run.write_text(
        report.model_copy(update={"config": {**report.config, "deployments": []}}).model_dump_json()
    )
    code, out = _tune("--fit-on", str(run))
    assert code == 2 and "records no deployment configs" in out and "--deployments" in out


def test_fit_on_refuses_a_run_with_no_disaggregated_deployment_to_fit(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    report = BenchReport.model_validate_json(PILOT.read_text())
    only = ["aggregated=deploy/local-aggregated.yaml"]
    run = tmp_path / "aggregated-only.json"
    run.write_text(
        report.model_copy(
            update={"config": {**report.config, "deployments": only}}
        ).model_dump_json()
    )
    code, out = _tune("--fit-on", str(run))
    assert code == 2 and "no disaggregated deployment" in out and "--fit-host-on" in out


@pytest.mark.parametrize(
    "args",
    [
        ["--fit-on", str(PILOT), "--load-from", str(PILOT_FIT)],
        ["--fit-host-on", "1p1d"],
        ["--write-profile", "fit.json"],
    ],
)
def test_fit_options_that_do_not_go_together_are_refused(
    args: list[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out = _tune(*args)
    assert code == 2 and "error" in out
    assert not (tmp_path / "fit.json").exists()


def test_the_pilot_warning_names_host_stalls_only_when_the_fit_has_them() -> None:
    """A fit without stalls (run AL's pilot fit) that misses a cell: the warning names the cell,
    without a stall clause."""
    row = ComparedRow("2p1d", "short", "TTFT p50", "ttft_p50_s", 0.0167, 0.0201)
    console = Console(record=True, width=400)
    report_pilot_check(
        PilotCheck(cells=30, misses=(row,)), str(PILOT), SimProfile.load(PILOT_FIT), console
    )
    out = console.export_text()
    assert "the fit misses 1 of 30 TTFT/ITL cells of the pilot" in out
    assert "host stalls" not in out
    assert "2p1d short TTFT p50: predicted 0.0167, measured 0.0201 (x0.831)" in out


def test_repeated_fit_on_pools_the_pilots_and_fits_on_them_together(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run AN's two pilots pooled (four rounds): the fit tune writes is the one pinned in
    tests/unit/sim/test_run_an.py (it held all 18 cells of run AN, fitted after the run)."""
    monkeypatch.chdir(ROOT)
    fitted = tmp_path / "fit.json"
    result = CliRunner().invoke(
        app,
        ["tune", "--profile", str(IDLE_AN), "--fit-on", str(AN_PILOTS[0]), "--fit-on",
         str(AN_PILOTS[1]), "--write-profile", str(fitted), *SMALL_SEARCH],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "pooled 2 runs (4 rounds) into one to fit on" in result.output
    assert_same_fit(SimProfile.load(fitted), SimProfile.load(AN_POOLED_FIT))


def test_fit_on_refuses_pilots_that_cannot_be_pooled(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    report = BenchReport.model_validate_json(AN_PILOTS[1].read_text())
    other = tmp_path / "other-rate.json"
    other.write_text(
        report.model_copy(
            update={"config": {**report.config, "request_rate": 8.0}}
        ).model_dump_json()
    )
    code, out = _tune("--fit-on", str(AN_PILOTS[0]), "--fit-on", str(other))
    assert code == 2
    assert "cannot pool the runs" in out and "request_rate" in " ".join(out.split())
