"""Pooled idle profiles on runs T-X (bench/RESULTS.md, "Pooled profiles"): each run's profile
refitted on the samples of the VM's profiles up to it (`pooled_profiles.pooled_profile`, what
`pdserve profile --pool` writes). Run X's own profile read the engines faster than any before
it (a 16-sequence decode step of 2.1 ms against 3.6-4.1) while the run served short requests as
the runs before it had; with the pool, run W's fit carried onto run X holds 17 of 18 where
without it it held 14 (test_run_x.py), every miss too low. Runs Y, Z and AA were profiled
with `pdserve profile --pool` and predicted before they ran. The committed pooled profiles must be
the pool of the recorded reports, and the cells outside the bound exactly those RESULTS.md
lists."""

from __future__ import annotations

import pytest

from pdserve.config import load_config
from pdserve.profiling.pool import fit_cost_model, pooled, read_report
from pdserve.sim.fit import fit_sim_profile
from pdserve.sim.profile import SimProfile
from tests.unit.sim.pooled_profiles import REPO, RESULTS, VM_RUNS, pooled_profile
from tests.unit.sim.test_against_measurements import FIXTURES, _ratio, assert_outside_by_fit

COMMITTED = ("w", "x")
"""The pooled profiles the tests below predict with (copies of bench/results/)."""


@pytest.mark.parametrize("run", COMMITTED)
def test_the_committed_pooled_profile_is_the_pool_of_the_recorded_reports(run: str) -> None:
    committed = SimProfile.load(FIXTURES / f"sim-profile-local-{run}-pooled.json")
    assert committed == pooled_profile(run)
    own = SimProfile.load(FIXTURES / f"sim-profile-local-{run}.json")
    assert committed.hop_s == own.hop_s and committed.router_s == own.router_s


def test_pooling_steadies_the_decode_step_the_profiles_read() -> None:
    """At 16 sequences the single profiles' fitted steps spread 1.7x (run X's 2.2 ms against
    3.6-3.7); the pooled ones within 1.25x."""

    def step_s(profile: SimProfile) -> float:
        return profile.cost_model.est_decode_step_s(16, 0)

    single = [step_s(SimProfile.load(FIXTURES / f"sim-profile-local-{r}.json")) for r in VM_RUNS]
    pooled = [step_s(pooled_profile(r)) for r in VM_RUNS]
    assert max(single) / min(single) > 1.6
    assert max(pooled) / min(pooled) < 1.25


def test_run_x_with_run_w_s_pooled_fit_and_its_own() -> None:
    """Both miss 1P1D's long-prompt TTFT p99 (0.57 and 0.55: its tail measured 0.36 s, against
    0.21 on 2P1D); the own fit, with a local prompt's loaded fixed cost fitted (x1.99), also
    2P1D's long TTFT p50 (1.16). Unpooled, run W's fit missed four cells and run X's own one."""
    outside = {
        "from_w": {("1p1d", "long", "ttft_p99_s")},
        "own": {("1p1d", "long", "ttft_p99_s"), ("2p1d", "long", "ttft_p50_s")},
    }
    fits = {"from_w": FIXTURES / "sim-profile-local-w-pooled-loaded.json"}
    assert_outside_by_fit(
        "mixed-3way-600-run-x.json", FIXTURES / "sim-profile-local-x-pooled.json", outside, fits
    )


RUN_Y = "mixed-3way-600-run-y.json"
OUTSIDE_Y = {
    "from_x": {
        ("1p1d", "short", "ttft_p99_s"), ("1p1d", "long", "ttft_p50_s"),
        ("1p1d", "long", "ttft_p99_s"),
    },
    "own": {
        ("aggregated", "short", "ttft_p99_s"), ("aggregated", "long", "ttft_p50_s"),
        ("aggregated", "long", "ttft_p99_s"), ("1p1d", "short", "ttft_p99_s"),
        ("1p1d", "long", "ttft_p99_s"),
    },
}  # fmt: skip
"""Run Y, profiled with `pdserve profile --pool` on runs T-X's reports and predicted before it
ran with run X's pooled fit: 15 of 18, all three misses on 1P1D, which ran faster than on
runs V-X (long TTFT p50 97 ms against 124-139; its short TTFT p99 24 ms, 1.66 predicted), with
a long-prompt tail its two rounds measured 0.18 and 0.41 s. Run Y's own pooled fit holds 13:
fitted on that fast 1P1D it puts aggregated too low (long TTFT p50 0.74, p99 0.67, short
TTFT p99 0.68)."""


def test_run_y_profiled_with_the_pool_as_the_command_wrote_it() -> None:
    """The committed profile is what `pooled` and the fits make of the recorded reports of
    runs T-Y (run Y's the only one with serving samples)."""
    reports = [read_report(RESULTS / f"profile-local-{r}.json") for r in (*VM_RUNS, "y")]
    samples = pooled([reports[-1], *reports[:-1]])
    base = load_config(REPO / "deploy" / "local.yaml").router.routing.cost_model
    model = fit_cost_model(samples, base).model
    fitted = fit_sim_profile(model, samples.serving, source="", local_prefill=samples.local_prefill)
    committed = SimProfile.load(FIXTURES / "sim-profile-local-y-pooled.json")
    assert committed.cost_model == fitted.cost_model
    assert (committed.hop_s, committed.local_hop_s) == (fitted.hop_s, fitted.local_hop_s)
    assert committed.local_prefill_fixed_s == fitted.local_prefill_fixed_s
    assert "pooled: this run + bench/results/profile-local-t.json + " in committed.source


def test_run_y_predicted_beforehand_with_run_x_s_pooled_fit_and_by_its_own() -> None:
    rows = assert_outside_by_fit(
        RUN_Y,
        FIXTURES / "sim-profile-local-y-pooled.json",
        OUTSIDE_Y,
        {"from_x": FIXTURES / "sim-profile-local-x-pooled-loaded.json"},
    )
    assert _ratio(rows["from_x"], "1p1d", "long", "ttft_p50_s") > 1
    assert _ratio(rows["from_x"], "1p1d", "long", "ttft_p99_s") < 1


RUN_Z = "mixed-3way-600-run-z.json"
OUTSIDE_Z = {
    "from_x": {
        ("aggregated", "short", "ttft_p50_s"), ("2p1d", "short", "ttft_p50_s"),
        ("1p1d", "short", "ttft_p99_s"),
    },
    "from_y": {
        ("aggregated", "short", "ttft_p50_s"), ("1p1d", "short", "ttft_p50_s"),
        ("2p1d", "short", "ttft_p50_s"), ("aggregated", "short", "ttft_p99_s"),
        ("aggregated", "long", "ttft_p50_s"), ("2p1d", "long", "ttft_p50_s"),
        ("aggregated", "long", "ttft_p99_s"), ("1p1d", "long", "ttft_p99_s"),
    },
}  # fmt: skip
"""Run Z, profiled with `--pool` on runs T-Y's reports and predicted before it ran: run X's
pooled fit 15 of 18 (aggregated's and 2P1D's short TTFT p50 0.83 and 0.79, 1P1D's short TTFT
p99 1.33); run Y's pooled fit 10, every miss too low."""


def test_run_z_predicted_beforehand_with_run_x_s_and_run_y_s_pooled_fits() -> None:
    fits = {
        "from_x": FIXTURES / "sim-profile-local-x-pooled-loaded.json",
        "from_y": FIXTURES / "sim-profile-local-y-pooled-loaded.json",
    }
    rows = assert_outside_by_fit(
        RUN_Z, FIXTURES / "sim-profile-local-z-pooled.json", OUTSIDE_Z, fits
    )
    assert all(_ratio(rows["from_y"], *key) < 1 for key in OUTSIDE_Z["from_y"])


RUN_AA = "mixed-3way-600-run-aa.json"


def test_run_aa_beforehand_with_the_pool_and_without_it() -> None:
    """Run AA, predicted before it ran with run X's pooled fit on the pooled profile: 16 of 18,
    the short TTFT p50s of 1P1D and 2P1D too low (0.84, 0.80). Its own samples alone with run
    X's own fit (both committed before the run; computed after it): all 18."""
    outside = {"from_x": {("1p1d", "short", "ttft_p50_s"), ("2p1d", "short", "ttft_p50_s")}}
    fits = {"from_x": FIXTURES / "sim-profile-local-x-pooled-loaded.json"}
    rows = assert_outside_by_fit(
        RUN_AA, FIXTURES / "sim-profile-local-aa-pooled.json", outside, fits
    )
    assert all(_ratio(rows["from_x"], *key) < 1 for key in outside["from_x"])
    unpooled = {"from_x": FIXTURES / "sim-profile-local-x-loaded.json"}
    assert_outside_by_fit(
        RUN_AA, FIXTURES / "sim-profile-local-aa.json", {"from_x": set()}, unpooled
    )
