"""Run I of bench/RESULTS.md: a third machine, measured with the current router (it counts its
own open streams per decode replica) and vLLM's queue busy-poll capped. Before the run, its
workload (run B's) was predicted from this machine's idle profile alone and with the load terms
carried from run F's fit (second machine) and from run B's (first machine). The bounded cells
outside the bound must be exactly the ones RESULTS.md lists."""

from __future__ import annotations

import functools

from pdserve.sim.carry import carry_load
from pdserve.sim.profile import SimProfile
from tests.unit.sim.test_against_measurements import (
    BOUNDED,
    FIXTURES,
    LAYOUTS,
    Rows,
    _outside,
    _profile,
    _ratio,
    assert_outside,
    fit_on_1p1d,
    predicted_rows,
)
from tests.unit.sim.test_new_machine import _profile_f

RUN_I = "mixed-3way-600-run-i.json"
IDLE_I = FIXTURES / "sim-profile-local-i.json"
OUTSIDE = {
    "from_f": {("2p1d", "short", "ttft_p99_s"), ("aggregated", "long", "ttft_p50_s")},
    "from_b": {("1p1d", "short", "ttft_p99_s"), ("2p1d", "short", "ttft_p99_s")},
    "own": {
        ("2p1d", "short", "ttft_p99_s"), ("aggregated", "short", "ttft_p50_s"),
        ("aggregated", "long", "ttft_p50_s"),
    },
}  # fmt: skip
"""Carried from F's fit (16 of 18 held), from B's (16), and run I's own 1P1D fit (15), with the
model of 2026-12-04 (the router's configured cost model, prompt tokens slowed under load, the
serving layer's intake; RESULTS.md). The misses are too high: short-request TTFT p99s
(1.47-1.85: the intake holds up the short requests a burst lands on longer than on this
machine) and aggregated's TTFT p50s (1.19-1.21). Since the fit takes in a local prompt's
loaded fixed cost (2026-12-05): F's fit holds one more (1P1D's short TTFT p99); run I's own
fits its local prompts at 2.45x their idle cost, and aggregated's engines, which prefill every
prompt themselves, come out too slow (short and long TTFT p50 1.19; 17 held before)."""


@functools.cache
def _prof(how: str) -> SimProfile:
    idle = SimProfile.load(IDLE_I)
    if how == "idle":
        return idle
    if how == "from_f":
        return carry_load(_profile_f(), idle)
    if how == "from_b":
        return carry_load(_profile("mixed-3way-600.json"), idle)
    return fit_on_1p1d(RUN_I, idle)


@functools.cache
def _rows(how: str, count_open_streams: bool = True) -> Rows:
    return predicted_rows(RUN_I, _prof(how), count_open_streams=count_open_streams)


def test_run_i_predicted_by_carrying_either_machine_s_fit_and_by_its_own_fit() -> None:
    for how, expected in OUTSIDE.items():
        rows = _rows(how)
        assert_outside(rows, expected, f"{how}: ")


def test_the_idle_profile_alone_holds_only_the_itl_cells() -> None:
    """Without load terms every TTFT comes out far too low: the serving layer under load is
    most of a short request's TTFT on this machine. The streams' cells hold."""
    rows = _rows("idle")
    held = {(d, s, f) for d in LAYOUTS for s, f in BOUNDED} - _outside(rows)
    assert held == {(d, "all", f) for d in LAYOUTS for f in ("itl_p50_s", "itl_p99_s")}, held


def test_modelling_the_router_s_open_streams_brings_aggregated_long_prompts_in() -> None:
    """The measured router counts its own open streams per decode replica, so a burst of long
    prompts spreads over both aggregated engines; modelled without it, the burst goes to one
    engine and aggregated's long TTFT p50 comes out 1.4x the measurement."""
    key = ("aggregated", "long", "ttft_p50_s")
    assert 0.85 <= _ratio(_rows("from_b"), *key) <= 1.15
    assert _ratio(_rows("from_b", count_open_streams=False), *key) > 1.3
