"""A local prompt's intake at its replica (`SimProfile.local_intake_per_token_s`) and the spread
of the host's speed between rounds (`round_speed_sigma`), fitted as `pdserve simulate
--fit-host-on 1p1d` fits them from a whole run (bench/RESULTS.md, "A local prompt's intake at
its replica"): the committed fit is what the fit writes, and the fitted intake brings the
aggregated engines' long prompts' hops to the measured ones."""

from __future__ import annotations

import functools

import pytest

from pdserve.bench.rounds import round_speed_sigma
from pdserve.sim.fit import fit_host_contention
from pdserve.sim.fit_engine import fit_local_intake_per_token
from pdserve.sim.predict import predict
from pdserve.sim.profile import SimProfile
from tests.unit.sim.test_against_measurements import FIXTURES, LAYOUTS, _report

FIT_X_INTAKE = FIXTURES / "sim-profile-local-x-pooled-intake-2026-12-05.json"
"""Run X's pooled fit with the intake (8.35 us/token) and the spread between rounds (0.086)."""


def fit_on_run(run: str, idle: SimProfile) -> SimProfile:
    """`idle` fitted on the recorded `run` as the CLI fits it: the serving layer on its 1P1D,
    the spread between rounds from all its deployments, the intake on its aggregated one."""
    report, workload = _report(run)
    return fit_host_contention(
        idle,
        LAYOUTS["1p1d"],
        workload,
        report.policies["1p1d"],
        host_cores=2,
        round_speed_sigma=round_speed_sigma(report.policies.values()),
        local_lengths=(LAYOUTS["aggregated"], report.policies["aggregated"]),
    )


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
    assert fitted.model_dump(exclude={"source"}) == committed.model_dump(exclude={"source"})
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
