"""Run V of bench/RESULTS.md: run B's workload on run U's VM, its idle profile the first to
measure a short prompt's fixed cost on the decode engine (joining running decode batches: 3.6
ms, against 4.9 alone and the prefill pool's 5.8), predicted before it ran with run U's fit
(fixtures/sim-profile-local-u-loaded.json) carried onto that profile. The bounded cells outside
the bound must be exactly the ones RESULTS.md lists, for that prediction and for run V's own
fit; and the short requests' hops to the decode replica and back measured under two of the
idle profile's hops, which is why the profile now measures a local prefill's hop too (run W)."""

from __future__ import annotations

from pdserve.sim.profile import SimProfile
from tests.unit.sim.test_against_measurements import (
    FIXTURES,
    LAYOUTS,
    _ratio,
    _report,
    assert_outside_by_fit,
)

RUN_V = "mixed-3way-600-run-v.json"
IDLE_V = FIXTURES / "sim-profile-local-v.json"
FIT_U = FIXTURES / "sim-profile-local-u-loaded.json"
OUTSIDE = {
    "from_u": {
        ("1p1d", "short", "ttft_p50_s"), ("2p1d", "short", "ttft_p50_s"),
        ("aggregated", "short", "ttft_p99_s"), ("1p1d", "short", "ttft_p99_s"),
        ("aggregated", "long", "ttft_p50_s"),
    },
    "own": {
        ("aggregated", "short", "ttft_p99_s"), ("1p1d", "short", "ttft_p50_s"),
        ("aggregated", "long", "ttft_p50_s"), ("aggregated", "long", "ttft_p99_s"),
    },
}  # fmt: skip
"""With run U's fit (beforehand): 13 of 18 (short TTFT p50s 1.31 and 1.24 on 1P1D and 2P1D,
short TTFT p99s 0.69 aggregated and 1.59 on 1P1D, aggregated long TTFT p50 0.85). Run V's own
1P1D fit: 14 (with its local prompts' loaded fixed cost fitted, x1.06, 1P1D's short TTFT p50
comes out 1.16 and its p99 moves into the bound)."""


def test_run_v_predicted_beforehand_with_run_u_s_fit_and_by_its_own_fit() -> None:
    rows = assert_outside_by_fit(RUN_V, IDLE_V, OUTSIDE, {"from_u": FIT_U})
    assert _ratio(rows["from_u"], "1p1d", "short", "ttft_p50_s") > 1.15


def test_the_profile_measured_a_local_prompt_under_the_prefill_pool_s_intercept() -> None:
    idle = SimProfile.load(IDLE_V)
    assert idle.local_prefill_fixed_s is not None
    assert idle.local_prefill_fixed_s < 0.75 * idle.cost_model.fixed_overhead_s


def test_a_short_request_s_hops_to_decode_and_back_measured_under_two_idle_hops() -> None:
    """decode_hops of the short requests (all prefilled on the decode engine): 5.6-6.3 ms at
    the median under load, against 7.2 ms for two of the idle profile's hops, which it
    measures on the remote-prefill path (its four hops over four)."""
    report, _ = _report(RUN_V)
    two_hops_s = 2 * SimProfile.load(IDLE_V).hop_s
    for dep in LAYOUTS:
        measured = report.policies[dep].classes["short"].stages["decode_hops"].p50_s
        assert measured is not None and measured < 0.9 * two_hops_s, (dep, measured)
