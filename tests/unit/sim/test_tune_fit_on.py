"""`pdserve tune --fit-on RUN`: on a CPU machine, fit the profile's cpu_host block on a run
measured now, then search. The run here is one the simulator made on a known host
(helpers.measured_run). Every misuse is refused with exit status 2 and a message."""

from __future__ import annotations

import pathlib
import re

import pytest
from typer.testing import CliRunner

from pdserve.bench.report import BenchReport
from pdserve.cli import app
from pdserve.sim import fit as fit_module
from pdserve.sim.profile import SimProfile
from tests.unit.sim.helpers import LOCAL_PROFILE, ROOT, write_run

SMALL_SEARCH = [
    "--config", str(ROOT / "deploy" / "local.yaml"), "--devices", "2", "--no-aggregated",
    "--chunk-tokens", "none", "--local-thresholds", "128", "--runs", "1",
    "--workload", "mixed", "--num-requests", "100", "--target-goodput", "0",
]  # fmt: skip


@pytest.fixture
def idle(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "idle.json"
    path.write_text(LOCAL_PROFILE.model_dump_json())
    return path


def _tune(idle: pathlib.Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app, ["tune", "--profile", str(idle), *args, *SMALL_SEARCH], env={"COLUMNS": "250"}
    )
    return result.exit_code, " ".join(result.output.split())


def _rewrite(run: pathlib.Path, **config: object) -> pathlib.Path:
    report = BenchReport.model_validate_json(run.read_text())
    out = run.with_name("edited.json")
    out.write_text(
        report.model_copy(update={"config": {**report.config, **config}}).model_dump_json()
    )
    return out


def test_tune_fits_the_host_on_the_run_then_recommends(
    tmp_path: pathlib.Path, idle: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fit_module, "STALL_RATES_PER_S", (0.0,))  # no stall search, for time
    fitted = tmp_path / "fit.json"
    code, out = _tune(idle, "--fit-on", str(write_run(tmp_path)), "--write-profile", str(fitted))
    assert code == 0, out
    # No deployment named: the run's first disaggregated one (aggregated comes first).
    assert "fitting the CPU host on 1p1d" in out and "CPU host fitted on 1p1d" in out
    assert "recommended:" in out
    prof = SimProfile.load(fitted)
    assert prof.cpu_host is not None and prof.cost_model == LOCAL_PROFILE.cost_model
    assert prof.host.local_intake_per_token_s > 0  # fitted on the run's aggregated deployment


def test_fit_on_names_the_run_s_deployments_when_asked_for_another(
    tmp_path: pathlib.Path, idle: pathlib.Path
) -> None:
    code, out = _tune(idle, "--fit-on", str(write_run(tmp_path)), "--fit-host-on", "1p2d")
    assert code == 2
    assert "1p2d" in out and "aggregated, 1p1d, 2p1d" in out


def test_fit_on_says_which_config_it_cannot_read(
    tmp_path: pathlib.Path, idle: pathlib.Path
) -> None:
    run = _rewrite(write_run(tmp_path), deployments=["agg=no/such/config.yaml"])
    code, out = _tune(idle, "--fit-on", str(run))
    assert code == 2
    assert "config error" in out and "no/such/config.yaml" in out


def test_fit_on_refuses_a_run_that_records_no_deployment_configs(
    tmp_path: pathlib.Path, idle: pathlib.Path
) -> None:
    run = _rewrite(write_run(tmp_path), deployments=[])  # as `pdserve bench --url` writes it
    code, out = _tune(idle, "--fit-on", str(run))
    assert code == 2 and "records no deployment configs" in out and "--deployments" in out


def test_fit_on_refuses_a_run_with_no_disaggregated_deployment_to_fit(
    tmp_path: pathlib.Path, idle: pathlib.Path
) -> None:
    aggregated = f"aggregated={ROOT / 'deploy' / 'local-aggregated.yaml'}"
    run = _rewrite(write_run(tmp_path), deployments=[aggregated])
    code, out = _tune(idle, "--fit-on", str(run))
    assert code == 2 and "needs a measured disaggregated deployment" in out


@pytest.mark.parametrize("args", [["--fit-host-on", "1p1d"], ["--write-profile", "fit.json"]])
def test_fit_options_without_a_run_are_refused(
    args: list[str], tmp_path: pathlib.Path, idle: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out = _tune(idle, *args)
    assert code == 2 and "need --fit-on" in out
    assert not (tmp_path / "fit.json").exists()


def test_the_main_help_keeps_the_host_fit_apart_and_names_no_past_run() -> None:
    result = CliRunner().invoke(app, ["tune", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = result.output
    assert "CPU host (shared cores)" in text and "--fit-on" in text
    assert not re.search(r"\bruns? [A-Z]{1,2}\b", text)  # help says what, not history
    assert "pilot" not in text.lower() and "RESULTS.md" not in text
