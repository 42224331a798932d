"""Run AN (four rounds), predicted before it ran (8653ace) to test the advice runs AL and AM
left: "when a pilot's own fit misses cells of the pilot, bench the pilot again"
(bench/RESULTS.md, "Run AN"). The first two-round pilot's fit missed one of its own 30 cells
(2P1D's short TTFT p50, too low), so a second pilot was benched; its fit held all 30 of its
own and was named the primary. On the run the primary held 14 of 18 (four TTFT p50s too high:
the second pilot had caught a slower spell of the host), while the first pilot's fit held all
18, and so did run AL's pilot fit carried onto AN's pooled profile; run X's fit held 9 (every
miss too low). A pilot's own misses did not tell which fit would hold. After the run, the two
pilots pooled into one fit (`tune --fit-on` twice) held all 18."""

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
from tests.unit.sim.test_run_al import PILOT_FIT as PILOT_FIT_AL

IDLE_AN = FIXTURES / "sim-profile-local-an-pooled.json"
PILOT1_FIT = FIXTURES / "sim-profile-local-an-pilot-pooled-intake-2026-12-05.json"
PILOT2_FIT = FIXTURES / "sim-profile-local-an-pilot2-pooled-intake-2026-12-05.json"
BOTH_FIT = FIXTURES / "sim-profile-local-an-pilots-pooled-intake-posthoc.json"
FITS = {"pilot1": PILOT1_FIT, "pilot2": PILOT2_FIT, "from_al_pilot": PILOT_FIT_AL,
        "from_x": FIT_X_INTAKE, "both_pilots": BOTH_FIT}  # fmt: skip
OUTSIDE_AN = {
    "pilot2": {
        ("aggregated", "long", "ttft_p50_s"), ("1p1d", "short", "ttft_p50_s"),
        ("2p1d", "short", "ttft_p50_s"), ("2p1d", "long", "ttft_p50_s"),
    },
    "pilot1": set(),
    "from_al_pilot": set(),
    "from_x": LONG_P50 | {
        ("aggregated", "short", "ttft_p50_s"), ("aggregated", "short", "ttft_p99_s"),
        ("aggregated", "long", "ttft_p99_s"), ("1p1d", "short", "ttft_p50_s"),
        ("1p1d", "long", "ttft_p99_s"), ("2p1d", "short", "ttft_p50_s"),
    },
}  # fmt: skip


def test_the_named_primary_is_what_the_fit_writes_on_the_second_pilot() -> None:
    fitted = fit_on_run("mixed-3way-600-run-an-pilot2.json", SimProfile.load(IDLE_AN))
    assert_same_fit(fitted, SimProfile.load(PILOT2_FIT))


def test_each_pilot_fit_on_its_own_pilot() -> None:
    """What decided the primary: the first pilot's fit missed one of its own cells (too low),
    the second's none."""
    rows = assert_outside_by_fit(
        "mixed-3way-600-run-an-pilot.json",
        IDLE_AN,
        {"pilot1": {("2p1d", "short", "ttft_p50_s")}},
        FITS,
    )
    assert _ratio(rows["pilot1"], "2p1d", "short", "ttft_p50_s") < 0.85
    assert_outside_by_fit("mixed-3way-600-run-an-pilot2.json", IDLE_AN, {"pilot2": set()}, FITS)


def test_run_an_predicted_beforehand() -> None:
    rows = assert_outside_by_fit("mixed-3way-600-run-an.json", IDLE_AN, OUTSIDE_AN, FITS)
    assert all(_ratio(rows["pilot2"], *key) > 1.15 for key in OUTSIDE_AN["pilot2"])
    assert all(_ratio(rows["from_x"], *key) < 0.86 for key in OUTSIDE_AN["from_x"])


def test_the_two_pilots_pooled_hold_run_an_after_the_fact() -> None:
    """Fitted after the run (not named beforehand): `tune --fit-on PILOT --fit-on PILOT2` pools
    both pilots' four rounds, and that fit holds every cell of run AN, its p50s 1.03-1.14,
    between the two pilots' own fits."""
    rows = assert_outside_by_fit(
        "mixed-3way-600-run-an.json", IDLE_AN, {"both_pilots": set()}, FITS
    )
    p50s = [
        _ratio(rows["both_pilots"], d, c, "ttft_p50_s")
        for d in ("aggregated", "1p1d", "2p1d")
        for c in ("short", "long")
    ]
    assert all(1.0 < r < 1.15 for r in p50s)
