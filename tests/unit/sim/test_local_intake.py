"""A local prompt's intake at its replica (`SimProfile.local_intake_per_token_s`) and the spread
of the host's speed between rounds (`round_speed_sigma`), fitted as `pdserve simulate
--fit-host-on 1p1d` fits them from a whole run (bench/RESULTS.md, "A local prompt's intake at
its replica"): the committed fit is what the fit writes, and the fitted intake brings the
aggregated engines' long prompts' hops to the measured ones."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.pool import pool_runs
from pdserve.bench.report import BenchReport
from pdserve.bench.rounds import round_speed_sigma
from pdserve.sim.fit import fit_host_contention
from pdserve.sim.fit_engine import fit_local_intake_per_token
from pdserve.sim.predict import predict
from pdserve.sim.profile import SimProfile
from tests.unit.sim.test_against_measurements import (
    FIXTURES,
    LAYOUTS,
    _ratio,
    _report,
    assert_outside_by_fit,
)

LONG_FIELDS = ("ttft_p50_s", "ttft_p99_s")

FIT_X_INTAKE = FIXTURES / "sim-profile-local-x-pooled-intake-2026-12-05.json"
"""Run X's pooled fit with the intake (8.35 us/token) and the spread between rounds (0.086)."""


def assert_same_fit(fitted: SimProfile, committed: SimProfile) -> None:
    """Every fitted number as committed, to 1e-9 relative (the last bits of a float sum
    differ between CPUs); the source text aside."""
    got, want = fitted.model_dump(exclude={"source"}), committed.model_dump(exclude={"source"})
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, (dict, float)):
            assert got[key] == pytest.approx(value, rel=1e-9, abs=0), key
        else:
            assert got[key] == value, key


def fit_on_run(run: str, idle: SimProfile) -> SimProfile:
    """`idle` fitted on the recorded `run` as the CLI fits it: the serving layer on its 1P1D,
    the spread between rounds from all its deployments, the intake on its aggregated one."""
    return fit_on_report(*_report(run), idle)


def fit_on_report(report: BenchReport, workload: BenchConfig, idle: SimProfile) -> SimProfile:
    """`fit_on_run` on a report already loaded (e.g. several runs pooled)."""
    return fit_host_contention(
        idle,
        LAYOUTS["1p1d"],
        workload,
        report.policies["1p1d"],
        host_cores=2,
        round_speed_sigma=round_speed_sigma(report.policies.values()),
        local_lengths=(LAYOUTS["aggregated"], report.policies["aggregated"]),
    )


def fit_on_pooled(runs: Sequence[str], idle: SimProfile) -> tuple[SimProfile, int]:
    """`idle` fitted on the recorded `runs` pooled into one, as `tune --fit-on A --fit-on B`
    pools and fits them; with the pooled run's round count."""
    pooled = pool_runs([_report(name)[0] for name in runs])
    workload = BenchConfig.model_validate({**pooled.config, "deployments": (), "json_path": None})
    return fit_on_report(pooled, workload, idle), pooled.config["rounds"]


@functools.cache
def _aggregated_hops_p50_s(run: str, profile_name: str, per_token_s: float | None) -> float:
    """The simulated decode_hops p50 of `run`'s long class on aggregated with the profile
    fixture `profile_name` (its intake replaced by `per_token_s` unless None)."""
    _, workload = _report(run)
    profile = SimProfile.load(FIXTURES / profile_name)
    if per_token_s is not None:
        profile = profile.model_copy(update={"local_intake_per_token_s": per_token_s})
    pooled = predict("aggregated", LAYOUTS["aggregated"], profile, workload, runs=8)
    stats = (pooled.classes["long"].stages or {})["decode_hops"]
    assert stats.p50_s is not None
    return stats.p50_s


def _measured_hops_p50_s(run: str, deployment: str, cls: str) -> float:
    report, _ = _report(run)
    stats = ((report.policies[deployment].classes or {})[cls].stages or {})["decode_hops"]
    assert stats.p50_s is not None
    return stats.p50_s


def test_run_x_s_committed_intake_fit_is_what_the_fit_writes() -> None:
    idle = SimProfile.load(FIXTURES / "sim-profile-local-x-pooled.json")
    fitted = fit_on_run("mixed-3way-600-run-x.json", idle)
    committed = SimProfile.load(FIT_X_INTAKE)
    assert_same_fit(fitted, committed)
    assert round(committed.local_intake_per_token_s * 1e6, 2) == 8.35
    assert round(committed.round_speed_sigma, 3) == 0.086
    # With the intake in, the short prompts' own hops need less of the hop factor (1.19).
    assert round(committed.local_hop_load_factor, 2) == 1.10


def test_the_fitted_intake_gives_the_aggregated_long_prompts_their_hops() -> None:
    """Run X's aggregated engines: long prompts (1,500 tokens) measured decode_hops p50 of
    about four times the short ones'; the fitted intake simulates them within a tenth, none
    simulates them at under half."""
    run = "mixed-3way-600-run-x.json"
    measured_s = _measured_hops_p50_s(run, "aggregated", "long")
    assert measured_s > 3 * _measured_hops_p50_s(run, "aggregated", "short")
    name = FIT_X_INTAKE.name
    assert _aggregated_hops_p50_s(run, name, None) == pytest.approx(measured_s, rel=0.1)
    assert _aggregated_hops_p50_s(run, name, 0.0) < 0.5 * measured_s


def test_no_intake_is_fitted_without_local_classes_of_different_lengths() -> None:
    """1P1D's local classes are its short prompts alone (the long ones prefill remotely):
    nothing to tell a per-token intake from, so the profile's is kept."""
    report, workload = _report("mixed-3way-600-run-x.json")
    profile = SimProfile.load(FIT_X_INTAKE).model_copy(update={"local_intake_per_token_s": 3e-6})
    kept = fit_local_intake_per_token(profile, LAYOUTS["1p1d"], workload, report.policies["1p1d"])
    assert kept == 3e-6


SHORT_P50 = {(d, "short", "ttft_p50_s") for d in ("aggregated", "1p1d", "2p1d")}
LONG_TAILS = {(d, "long", f) for d in ("aggregated", "1p1d", "2p1d") for f in LONG_FIELDS}
OUTSIDE_AG = {
    "from_x": SHORT_P50 | LONG_TAILS | {("2p1d", "short", "ttft_p99_s")},
    "from_af": SHORT_P50 | LONG_TAILS,
    "from_x_hops": SHORT_P50
    | LONG_TAILS
    | {("aggregated", "short", "ttft_p99_s"), ("2p1d", "short", "ttft_p99_s")},
    "own_intake": set(),
}
"""Run AG (four rounds), predicted before it ran (e29d316): run X's intake fit 8 of 18, run AF's
9, run X's hop fit (the model before) 7; every miss too low, all TTFTs. The host was slower than
on runs AD-AF throughout (short TTFT p50 16-20 ms by round against 12-15; its first profile read
the decode step 33 % off the pool, the second, kept, 20 %) while the ITLs held. Fitted on itself
the model holds all 18."""


@pytest.mark.parametrize("run", ["ag", "ah", "ai", "aj", "ak"])
def test_a_run_s_own_committed_intake_fit_is_what_the_fit_writes(run: str) -> None:
    """Runs AG-AK fitted on themselves (each of AH's, AI's and AJ's own fits was named
    beforehand for a later run)."""
    idle = SimProfile.load(FIXTURES / f"sim-profile-local-{run}-pooled.json")
    fitted = fit_on_run(f"mixed-3way-600-run-{run}.json", idle)
    committed = SimProfile.load(FIXTURES / f"sim-profile-local-{run}-pooled-intake-2026-12-05.json")
    assert_same_fit(fitted, committed)


def test_run_ag_predicted_beforehand_with_the_intake() -> None:
    fits = {
        "from_x": FIT_X_INTAKE,
        "from_af": FIXTURES / "sim-profile-local-af-pooled-intake-2026-12-05.json",
        "from_x_hops": FIXTURES / "sim-profile-local-x-pooled-hops-2026-12-05.json",
        "own_intake": FIXTURES / "sim-profile-local-ag-pooled-intake-2026-12-05.json",
    }
    idle = FIXTURES / "sim-profile-local-ag-pooled.json"
    rows = assert_outside_by_fit("mixed-3way-600-run-ag.json", idle, OUTSIDE_AG, fits)
    assert all(_ratio(rows[how], *key) < 1 for how, keys in OUTSIDE_AG.items() for key in keys)


OUTSIDE_AH = {
    "from_ag": {
        ("2p1d", "short", "ttft_p50_s"), ("1p1d", "short", "ttft_p99_s"),
        ("2p1d", "short", "ttft_p99_s"), ("aggregated", "long", "ttft_p50_s"),
        ("1p1d", "long", "ttft_p99_s"),
    },
    "from_x": {("aggregated", "short", "ttft_p50_s"), ("aggregated", "short", "ttft_p99_s")},
}  # fmt: skip
"""Run AH (two rounds), predicted before it ran (1813cdb) with run AG's own intake fit, named
first because both of AH's profiles warned (35 % and 29 % slower than the pool), the slow hour
AG was fitted in: 13 of 18, every miss too high; the host had come back. Run X's intake fit: 16,
both misses aggregated's short TTFTs, too low (p50 0.81, p99 0.66)."""


def test_run_ah_predicted_beforehand_with_the_intake() -> None:
    fits = {
        "from_ag": FIXTURES / "sim-profile-local-ag-pooled-intake-2026-12-05.json",
        "from_x": FIT_X_INTAKE,
    }
    idle = FIXTURES / "sim-profile-local-ah-pooled.json"
    rows = assert_outside_by_fit("mixed-3way-600-run-ah.json", idle, OUTSIDE_AH, fits)
    for how, keys in OUTSIDE_AH.items():
        for key in keys:
            assert (_ratio(rows[how], *key) > 1) == (how == "from_ag")


OUTSIDE_AI = {
    "from_x": {("aggregated", "long", "ttft_p99_s")},
    "from_af": {("aggregated", "long", "ttft_p99_s")},
}
"""Run AI (four rounds), predicted before it ran (a98e7f2): run X's intake fit and run AF's each
held 17 of 18; both missed aggregated's long TTFT p99, too low (0.66, 0.68): its third round
ran slow (TPOT p50 3.3 ms against 2.0-2.3), its five slowest long prompts in that round's
first seconds."""


OUTSIDE_AJ = {
    "from_x": {("2p1d", "short", "ttft_p50_s"), ("1p1d", "long", "ttft_p99_s")},
    "from_ai": {("1p1d", "long", "ttft_p99_s")},
}
"""Run AJ (four rounds), predicted before it ran (d65eba8): run X's intake fit held 16 of 18
(2P1D's short TTFT p50 0.84, 1P1D's long TTFT p99 0.58), run AI's own intake fit 17 (1P1D's long
TTFT p99 0.64), all too low. 1P1D's slowest long prompts came in the rounds' first seconds: the
first long burst of rounds two to four took 296-398 ms against a median of 144 for the later
bursts."""


LONG_P50 = {(d, "long", "ttft_p50_s") for d in ("aggregated", "1p1d", "2p1d")}
OUTSIDE_AK = {
    "from_x": SHORT_P50 | LONG_TAILS,
    "from_aj": LONG_P50 | {("aggregated", "long", "ttft_p99_s"), ("2p1d", "long", "ttft_p99_s")},
    "from_ah": LONG_TAILS,
}
"""Run AK (four rounds, the engines' warm-up burst on), predicted before it ran (cc9a934), both
of its profiles 35 % and 29 % slower than the pool: run X's intake fit held 9 of 18, run AJ's
own 13, run AH's own 12; every miss a TTFT, too low (long TTFT p50 0.68-0.77). The run's own
profile samples prefilled 28-48 % slower than the pooled fit. Fitted on itself the model holds
all 18."""


BEFOREHAND = {
    "ai": (OUTSIDE_AI, {"from_af": "sim-profile-local-af-pooled-intake-2026-12-05.json"}, 0.7),
    "aj": (OUTSIDE_AJ, {"from_ai": "sim-profile-local-ai-pooled-intake-2026-12-05.json"}, 0.85),
    "ak": (
        OUTSIDE_AK | {"own_intake": set()},
        {
            "from_aj": "sim-profile-local-aj-pooled-intake-2026-12-05.json",
            "from_ah": "sim-profile-local-ah-pooled-intake-2026-12-05.json",
            "own_intake": "sim-profile-local-ak-pooled-intake-2026-12-05.json",
        },
        0.85,
    ),
}
"""Per run: the cells outside the bound by fit, the fit named second (run X's first), and the
ratio every miss is below (all too low)."""


@pytest.mark.parametrize("run", sorted(BEFOREHAND))
def test_runs_ai_to_ak_predicted_beforehand_with_the_intake(run: str) -> None:
    """Every miss of the named predictions is as listed, and below the run's ratio."""
    outside, second, below = BEFOREHAND[run]
    fits = {"from_x": FIT_X_INTAKE} | {how: FIXTURES / name for how, name in second.items()}
    idle = FIXTURES / f"sim-profile-local-{run}-pooled.json"
    rows = assert_outside_by_fit(f"mixed-3way-600-run-{run}.json", idle, outside, fits)
    assert all(_ratio(rows[how], *key) < below for how, keys in outside.items() for key in keys)
