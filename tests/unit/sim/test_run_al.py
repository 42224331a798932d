"""Run AL (four rounds), predicted before it ran (d1fb82d) with the fit on a two-round pilot run
measured just before it on the same host, what `pdserve tune --fit-on` does (bench/RESULTS.md,
"Run AL"): all 18 bounded cells held. The profile had warned (27 % slower than the pool); run
X's intake fit carried onto the pooled profile held 12 (every miss a TTFT, too low), run AK's
own fit from the slow hour before 17 (2P1D's short TTFT p99, too high)."""

from __future__ import annotations

from pdserve.sim.profile import SimProfile
from tests.unit.sim.test_against_measurements import _ratio, assert_outside_by_fit
from tests.unit.sim.test_local_intake import (
    FIT_X_INTAKE,
    FIXTURES,
    LONG_P50,
    assert_same_fit,
    fit_on_run,
)

PILOT_FIT = FIXTURES / "sim-profile-local-al-pilot-pooled-intake-2026-12-05.json"
IDLE_AL = FIXTURES / "sim-profile-local-al-pooled.json"
OUTSIDE_AL = {
    "pilot": set(),
    "from_x": LONG_P50 | {
        ("aggregated", "short", "ttft_p50_s"), ("aggregated", "short", "ttft_p99_s"),
        ("1p1d", "long", "ttft_p99_s"),
    },
    "from_ak": {("2p1d", "short", "ttft_p99_s")},
}  # fmt: skip


def test_the_named_pilot_fit_is_what_the_fit_writes_on_the_pilot() -> None:
    fitted = fit_on_run("mixed-3way-600-run-al-pilot.json", SimProfile.load(IDLE_AL))
    assert_same_fit(fitted, SimProfile.load(PILOT_FIT))


def test_run_al_predicted_beforehand_with_a_pilot_fit_holds_every_cell() -> None:
    fits = {
        "pilot": PILOT_FIT,
        "from_x": FIT_X_INTAKE,
        "from_ak": FIXTURES / "sim-profile-local-ak-pooled-intake-2026-12-05.json",
    }
    rows = assert_outside_by_fit("mixed-3way-600-run-al.json", IDLE_AL, OUTSIDE_AL, fits)
    assert all(_ratio(rows["from_x"], *key) < 0.86 for key in OUTSIDE_AL["from_x"])
    assert _ratio(rows["from_ak"], "2p1d", "short", "ttft_p99_s") > 1.3
