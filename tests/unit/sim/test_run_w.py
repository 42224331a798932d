"""Run W of bench/RESULTS.md: run B's workload on run V's VM half an hour later, its idle
profile the first to measure both a short prompt's fixed cost on the decode engine and a local
prefill's hop (2.4 ms each way, against the remote-prefill path's 3.1), predicted before it ran
with two committed fits carried onto that profile: run U's (16 of 18) and run V's (9 of 18,
every miss too low: run V's idle profile decoded slowly, so its fit learned no extra step time
under load, and carried onto a faster idle profile it had none to add). Run W's own fit holds
all 18. The bounded cells outside the bound must be exactly the ones RESULTS.md lists."""

from __future__ import annotations

from pdserve.sim.profile import SimProfile
from tests.unit.sim.test_against_measurements import (
    FIXTURES,
    _ratio,
    assert_outside_by_fit,
)

RUN_W = "mixed-3way-600-run-w.json"
IDLE_W = FIXTURES / "sim-profile-local-w.json"
FITS = {
    "from_u": FIXTURES / "sim-profile-local-u-loaded.json",
    "from_v": FIXTURES / "sim-profile-local-v-loaded.json",
}
OUTSIDE = {
    "from_u": {("aggregated", "long", "ttft_p50_s"), ("1p1d", "long", "ttft_p99_s")},
    "from_v": {
        ("aggregated", "short", "ttft_p50_s"), ("1p1d", "short", "ttft_p50_s"),
        ("2p1d", "short", "ttft_p50_s"), ("aggregated", "short", "ttft_p99_s"),
        ("aggregated", "long", "ttft_p50_s"), ("1p1d", "long", "ttft_p50_s"),
        ("2p1d", "long", "ttft_p50_s"), ("aggregated", "long", "ttft_p99_s"),
        ("1p1d", "long", "ttft_p99_s"),
    },
    "own": set(),
}  # fmt: skip
"""Beforehand: run U's fit 16 of 18 (aggregated long TTFT p50 0.82, 1P1D long TTFT p99 0.68),
run V's fit 9 (every miss too low: short TTFT p50s 0.78-0.82, long p50s 0.75-0.85). Run W's own
1P1D fit: all 18."""


def test_run_w_predicted_beforehand_with_two_fits_and_by_its_own_fit() -> None:
    rows = assert_outside_by_fit(RUN_W, IDLE_W, OUTSIDE, FITS)
    assert all(_ratio(rows["from_v"], *key) < 1 for key in OUTSIDE["from_v"])


def test_the_profile_measured_the_local_path_faster_than_the_remote_one() -> None:
    idle = SimProfile.load(IDLE_W)
    assert idle.local_hop_s is not None and idle.local_hop_s < 0.85 * idle.hop_s
    assert idle.local_prefill_fixed_s is not None
    assert idle.local_prefill_fixed_s < 0.75 * idle.cost_model.fixed_overhead_s
