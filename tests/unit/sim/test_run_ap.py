"""Run AP (four rounds, 2026-12-06), predicted before it ran (3509af7), a day after run AO,
while the profile warned 44 % slow (bench/RESULTS.md, "Run AP"). The primary followed the
tuning guide: every pilot of this workload pooled into one fit (`pdserve tune --fit-on` five
times: run AN's two and AO's, a day old, and two new ones). It held all 18 cells. So did the
two new pilots pooled, the second new pilot alone and run AO's three-pilot fit carried onto
AP's profile; the first new pilot alone held 17 (2P1D's short TTFT p99 too high), run X's fit
8 (every miss too low)."""

from __future__ import annotations

from pdserve.sim.profile import SimProfile
from tests.unit.sim.test_against_measurements import _ratio, assert_outside_by_fit
from tests.unit.sim.test_local_intake import (
    FIT_X_INTAKE,
    FIXTURES,
    LONG_P50,
    assert_same_fit,
    fit_on_pooled,
)
from tests.unit.sim.test_run_ao import PILOTS as AO_PILOTS
from tests.unit.sim.test_run_ao import THREE_FIT

IDLE_AP = FIXTURES / "sim-profile-local-ap-pooled.json"
NEW_PILOTS = ("mixed-3way-600-run-ap-pilot.json", "mixed-3way-600-run-ap-pilot2.json")
FIVE_FIT = FIXTURES / "sim-profile-local-ap-five-pilots-intake.json"
FITS = {
    "five_pilots": FIVE_FIT,
    "two_pilots": FIXTURES / "sim-profile-local-ap-two-pilots-intake.json",
    "pilot1": FIXTURES / "sim-profile-local-ap-pilot-intake.json",
    "pilot2": FIXTURES / "sim-profile-local-ap-pilot2-intake.json",
    "from_ao": THREE_FIT,
    "from_x": FIT_X_INTAKE,
}
SHORT_P50 = {(d, "short", "ttft_p50_s") for d in ("aggregated", "1p1d", "2p1d")}
OUTSIDE_AP = {
    "five_pilots": set(),
    "two_pilots": set(),
    "pilot1": {("2p1d", "short", "ttft_p99_s")},
    "pilot2": set(),
    "from_ao": set(),
    "from_x": LONG_P50 | SHORT_P50 | {
        ("aggregated", "short", "ttft_p99_s"), ("aggregated", "long", "ttft_p99_s"),
        ("1p1d", "long", "ttft_p99_s"), ("2p1d", "long", "ttft_p99_s"),
    },
}  # fmt: skip


def test_the_named_primary_is_the_fit_on_every_pilot_pooled() -> None:
    fitted, rounds = fit_on_pooled((*AO_PILOTS, *NEW_PILOTS), SimProfile.load(IDLE_AP))
    assert rounds == 10
    assert_same_fit(fitted, SimProfile.load(FIVE_FIT))


def test_run_ap_predicted_beforehand_with_every_pilot_pooled_holds_every_cell() -> None:
    rows = assert_outside_by_fit("mixed-3way-600-run-ap.json", IDLE_AP, OUTSIDE_AP, FITS)
    assert _ratio(rows["pilot1"], "2p1d", "short", "ttft_p99_s") > 1.3  # too high
    assert all(_ratio(rows["from_x"], *key) < 0.8 for key in OUTSIDE_AP["from_x"])
