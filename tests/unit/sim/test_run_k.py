"""Runs K and L of bench/RESULTS.md. Run K: run I's VM and workload again, on a quiet host,
with the router's start-up import fixed (no more collector pause ten seconds into a phase) and
the idle profile taken right before the run. Run L: another workload (3 req/s, 30 % long
prompts) an hour later, predicted before it ran with run K's 1P1D fit. The bounded cells
outside the bound must be exactly the ones RESULTS.md lists: for run K, with its own fit and
with run B's fit carried to its profile; for run L, with run K's fit."""

from __future__ import annotations

import functools

from pdserve.sim.carry import carry_load
from pdserve.sim.profile import SimProfile
from tests.unit.sim.test_against_measurements import (
    FIXTURES,
    LAYOUTS,
    Rows,
    _profile,
    _ratio,
    assert_outside,
    fit_on_1p1d,
    predicted_rows,
)

RUN_K = "mixed-3way-600-run-k.json"
RUN_L = "mixed-3way-rate3-long30-run-l.json"
OUTSIDE_L = {
    ("aggregated", "long", "ttft_p99_s"), ("1p1d", "short", "ttft_p99_s"),
    ("1p1d", "long", "ttft_p50_s"), ("1p1d", "long", "ttft_p99_s"),
}  # fmt: skip
"""Run L predicted with run K's own fit under today's model: 14 of 18, every ITL cell and every
p50 but 1P1D's long prompts (0.84); the other misses are TTFT p99s, too low. (The prediction
committed before the run, bench/results/sim-predicted-run-l-from-k.json, held 14 too, its
p50 miss aggregated's long prompts.)"""
IDLE_K = FIXTURES / "sim-profile-local-k.json"
OUTSIDE = {
    "own": {
        ("aggregated", "long", "ttft_p50_s"), ("aggregated", "long", "ttft_p99_s"),
        ("1p1d", "long", "ttft_p99_s"), ("2p1d", "long", "ttft_p50_s"),
        ("2p1d", "long", "ttft_p99_s"),
    },
    "from_b": {
        ("aggregated", "long", "ttft_p50_s"), ("aggregated", "long", "ttft_p99_s"),
        ("1p1d", "short", "ttft_p99_s"), ("1p1d", "long", "ttft_p99_s"),
        ("2p1d", "short", "ttft_p50_s"), ("2p1d", "long", "ttft_p50_s"),
        ("2p1d", "long", "ttft_p99_s"),
    },
}  # fmt: skip
"""Run K's own fit holds 13 of 18: every cell but the three long-prompt TTFT p99s (0.53-0.59 of
measured, too low) and the long-prompt TTFT p50s of aggregated and 2P1D (0.83); the short
requests' p99s hold with the serving layer's intake (0.56-0.59 without it). Run B's fit,
carried from the first machine, holds 11 (2P1D's short TTFT p50 0.81)."""


@functools.cache
def _prof(how: str) -> SimProfile:
    idle = SimProfile.load(IDLE_K)
    if how == "from_b":
        return carry_load(_profile("mixed-3way-600.json"), idle)
    return fit_on_1p1d(RUN_K, idle)


@functools.cache
def _rows(how: str) -> Rows:
    return predicted_rows(RUN_K, _prof(how), count_open_streams=True)


def test_run_k_predicted_by_its_own_fit_and_by_run_b_s_carried_fit() -> None:
    for how, expected in OUTSIDE.items():
        rows = _rows(how)
        assert_outside(rows, expected, f"{how}: ")


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


def test_run_l_predicted_beforehand_with_run_k_s_fit() -> None:
    rows = predicted_rows(RUN_L, _prof("own"), count_open_streams=True)
    assert_outside(rows, OUTSIDE_L)
    assert all(_ratio(rows, *key) < 1 for key in OUTSIDE_L)
