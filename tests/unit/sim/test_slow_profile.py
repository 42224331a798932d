"""An idle profile slower than the run it is fitted on is caught: an engine is not faster under
load than idle, so a run that decoded faster than the profile's steps allow means the profile
was taken while the host was slower (a busy moment, a VM still settling). `pdserve simulate
--fit-host-on` says so, still fits, and prints the run's rounds."""

from __future__ import annotations

import json
import pathlib

import pytest
from typer.testing import CliRunner

from pdserve.bench.config import BenchConfig
from pdserve.cli import app
from pdserve.sim import fit as fit_module
from pdserve.sim.fit_engine import SLOW_PROFILE_TOLERANCE, idle_steps_slower_than_run
from tests.unit.sim.helpers import LOCAL_PROFILE, local_layouts, measured_run, write_run

LAYOUT = local_layouts("1p1d")["1p1d"]
SLOW = LOCAL_PROFILE.model_copy(
    update={
        "cost_model": LOCAL_PROFILE.cost_model.model_copy(
            update={"decode_base_s": 0.012, "decode_per_seq_s": 6e-4}
        )
    }
)
"""The idle profile with decode steps about 2.5x slower than the run's host decoded."""


def _cfg() -> BenchConfig:
    return BenchConfig.model_validate({**measured_run().config, "json_path": None})


def test_a_profile_slower_than_the_run_is_caught() -> None:
    measured = measured_run().policies["1p1d"]
    got = idle_steps_slower_than_run(SLOW, LAYOUT, _cfg(), measured)
    assert got is not None
    simulated_s, measured_s = got
    assert measured_s == measured.tpot_p50_s
    assert simulated_s > measured_s * (1 + SLOW_PROFILE_TOLERANCE)


def test_a_profile_of_the_run_s_own_engines_passes() -> None:
    measured = measured_run().policies["1p1d"]
    assert idle_steps_slower_than_run(LOCAL_PROFILE, LAYOUT, _cfg(), measured) is None


def test_a_run_without_tpot_is_not_judged() -> None:
    measured = measured_run().policies["1p1d"].model_copy(update={"tpot_p50_s": None})
    assert idle_steps_slower_than_run(SLOW, LAYOUT, _cfg(), measured) is None


def test_the_simulate_command_warns_fits_and_prints_the_rounds(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fit_module, "STALL_RATES_PER_S", (0.0,))  # no stall search, for time
    run = write_run(tmp_path, rounds=2)
    profile = tmp_path / "slow.json"
    profile.write_text(SLOW.model_dump_json())
    out, fitted = tmp_path / "o.json", tmp_path / "fitted.json"
    args = ["simulate", "--profile", str(profile), "--measured", str(run), "--fit-host-on"]
    args += ["1p1d", "--json", str(out), "--write-profile", str(fitted), "--runs", "2"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "warning: the run decoded faster than this profile's idle engines" in text
    assert "CPU host fitted on 1p1d (" in text
    assert "TPOT p50 by round: aggregated " in text
    doc = json.loads(out.read_text())
    assert doc["profile"]["cpu_host"]["host_cores"] >= 1
    rows = doc["compared"]
    assert {r["deployment"] for r in rows} == {"aggregated", "1p1d", "2p1d"}
    assert all(len(r["measured_rounds"]) == 2 for r in rows if r["field"] == "ttft_p50_s")
    host = json.loads(fitted.read_text())["cpu_host"]
    assert host["round_speed_sigma"] > 0  # two rounds: their spread is set first


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fit-host-on", "1p1d"], "need --measured"),
        (["--write-profile", "x.json", "--measured", "RUN"], "needs --fit-host-on"),
        (["--fit-host-on", "9p9d", "--measured", "RUN"], "the run has: aggregated, 1p1d, 2p1d"),
    ],
)
def test_fit_options_that_cannot_work_are_refused(
    tmp_path: pathlib.Path, args: list[str], message: str
) -> None:
    run = write_run(tmp_path)
    profile = tmp_path / "p.json"
    profile.write_text(LOCAL_PROFILE.model_dump_json())
    args = [str(run) if a == "RUN" else a for a in args]
    config = ["--config", f"1p1d={LAYOUT_CONFIG}"] if "--measured" not in args else []
    result = CliRunner().invoke(
        app, ["simulate", "--profile", str(profile), *config, *args], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


LAYOUT_CONFIG = pathlib.Path(__file__).resolve().parents[3] / "deploy" / "local.yaml"
