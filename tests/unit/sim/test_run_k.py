"""Run K of bench/RESULTS.md: run I's VM and workload again, on a quiet host, with the router's
start-up import fixed (no more collector pause ten seconds into a phase) and the idle profile
taken right before the run. The bounded cells outside the bound must be exactly the ones
RESULTS.md lists, for run K's own 1P1D fit and for run B's fit carried to run K's profile."""

from __future__ import annotations

import functools

from pdserve.sim.carry import carry_load
from pdserve.sim.fit import fit_host_contention
from pdserve.sim.predict import compare, predict
from pdserve.sim.profile import SimProfile
from tests.unit.sim.test_against_measurements import (
    FIXTURES,
    LAYOUTS,
    RUNS,
    Rows,
    _outside,
    _profile,
    _ratio,
    _report,
)

RUN_K = "mixed-3way-600-run-k.json"
IDLE_K = FIXTURES / "sim-profile-local-k.json"
OUTSIDE = {
    "own": {
        ("aggregated", "short", "ttft_p99_s"), ("aggregated", "long", "ttft_p50_s"),
        ("aggregated", "long", "ttft_p99_s"), ("2p1d", "short", "ttft_p99_s"),
    },
    "from_b": {
        ("aggregated", "short", "ttft_p50_s"), ("aggregated", "short", "ttft_p99_s"),
        ("aggregated", "long", "ttft_p50_s"), ("aggregated", "long", "ttft_p99_s"),
        ("1p1d", "short", "ttft_p50_s"), ("1p1d", "long", "ttft_p99_s"),
        ("2p1d", "short", "ttft_p50_s"), ("2p1d", "long", "ttft_p50_s"),
        ("2p1d", "long", "ttft_p99_s"),
    },
}  # fmt: skip
"""Run K's own fit holds 14 of 18: every 1P1D cell, and of aggregated and 2P1D everything but
three TTFT p99s (0.40-0.55 of measured, too low) and aggregated's long-prompt TTFT p50 (0.64:
the hops before a local long prompt's first token, 32 ms measured at the median against 11
simulated). Run B's fit, carried from the first machine, holds 9."""


@functools.cache
def _prof(how: str) -> SimProfile:
    idle = SimProfile.load(IDLE_K)
    if how == "from_b":
        return carry_load(_profile("mixed-3way-600.json"), idle)
    report, workload = _report(RUN_K)
    return fit_host_contention(
        idle, LAYOUTS["1p1d"], workload, report.policies["1p1d"], host_cores=2
    )


@functools.cache
def _rows(how: str) -> Rows:
    report, workload = _report(RUN_K)
    predictions = [predict(n, lay, _prof(how), workload, runs=RUNS) for n, lay in LAYOUTS.items()]
    return {(r.deployment, r.scope, r.field): r for r in compare(predictions, report)}


def test_run_k_predicted_by_its_own_fit_and_by_run_b_s_carried_fit() -> None:
    for how, expected in OUTSIDE.items():
        rows = _rows(how)
        outside = _outside(rows)
        detail = {k: round(_ratio(rows, *k), 2) for k in outside ^ expected}
        assert outside == expected, f"{how}: cells that moved across the bound: {detail}"


def test_run_k_s_misses_are_all_too_low() -> None:
    """Every cell run K's own fit misses is predicted short of the measurement: the model's
    tails are too thin, not too fat."""
    rows = _rows("own")
    assert all(_ratio(rows, *key) < 1 for key in OUTSIDE["own"])


def test_run_k_s_own_fit_holds_every_itl_cell_within_a_tenth() -> None:
    """The streams, thousands of gaps per layout, are what the fit pins down best: every ITL
    p50 and p99 within 10 % (the bound is 15 % / 30 %)."""
    rows = _rows("own")
    for dep in LAYOUTS:
        for field in ("itl_p50_s", "itl_p99_s"):
            assert abs(_ratio(rows, dep, "all", field) - 1) <= 0.10, (dep, field)
