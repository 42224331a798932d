"""Run AO (four rounds), predicted before it ran (db301bb) with the fit on three two-round
pilots pooled (`pdserve tune --fit-on` three times: run AN's two, benched 1-1.5 h before, and a
new one just before the run), the workflow run AN suggested after the fact (bench/RESULTS.md,
"Run AO"): all 18 cells held. The new pilot's fit alone held 18 too (though it missed two cells
of its own pilot), run AN's two pilots pooled 18, run X's fit 7 (every miss too low)."""

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
from tests.unit.sim.test_run_an import BOTH_FIT, IDLE_AN

PILOTS = ("mixed-3way-600-run-an-pilot.json", "mixed-3way-600-run-an-pilot2.json",
          "mixed-3way-600-run-ao-pilot.json")  # fmt: skip
THREE_FIT = FIXTURES / "sim-profile-local-ao-three-pilots-intake.json"
FITS = {"three_pilots": THREE_FIT, "ao_pilot": FIXTURES / "sim-profile-local-ao-pilot-intake.json",
        "an_pilots": BOTH_FIT, "from_x": FIT_X_INTAKE}  # fmt: skip
SHORT = {(d, "short", f) for d in ("aggregated", "2p1d") for f in ("ttft_p50_s", "ttft_p99_s")}
OUTSIDE_AO = {
    "three_pilots": set(),
    "ao_pilot": set(),
    "an_pilots": set(),
    "from_x": LONG_P50 | SHORT | {
        ("aggregated", "long", "ttft_p99_s"), ("1p1d", "short", "ttft_p50_s"),
        ("1p1d", "long", "ttft_p99_s"), ("2p1d", "long", "ttft_p99_s"),
    },
}  # fmt: skip


def test_the_named_primary_is_the_fit_on_the_three_pilots_pooled() -> None:
    fitted, rounds = fit_on_pooled(PILOTS, SimProfile.load(IDLE_AN))
    assert rounds == 6
    assert_same_fit(fitted, SimProfile.load(THREE_FIT))


def test_run_ao_predicted_beforehand_with_three_pilots_pooled_holds_every_cell() -> None:
    rows = assert_outside_by_fit("mixed-3way-600-run-ao.json", IDLE_AN, OUTSIDE_AO, FITS)
    assert all(_ratio(rows["from_x"], *key) < 0.82 for key in OUTSIDE_AO["from_x"])
