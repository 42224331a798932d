"""Run R of bench/RESULTS.md: run B's workload (4 req/s, half long prompts in bursts of four) on
run Q's VM, predicted before it ran with run Q's own 1P1D fit (the fitted profile as committed,
fixtures/sim-profile-local-q-loaded.json) carried onto the idle profile taken right before the
run. The bounded cells outside the bound must be exactly the ones RESULTS.md lists. The short
requests a burst lands on are the slowest of their class, measured, and the model slows them
(the serving layer's intake, added after the run)."""

from __future__ import annotations

import statistics

from pdserve.bench.report import RequestResult
from pdserve.sim.predict import workload_requests
from pdserve.sim.profile import SimProfile
from pdserve.sim.simulator import Simulation
from tests.unit.sim.test_against_measurements import (
    BOUNDED,
    FIXTURES,
    LAYOUTS,
    RUNS,
    Rows,
    _ratio,
    _report,
    assert_outside,
    own_or_carried_fit,
    own_or_carried_rows,
)

RUN_R = "mixed-3way-600-run-r.json"
IDLE_R = FIXTURES / "sim-profile-local-r.json"
FIT_Q = FIXTURES / "sim-profile-local-q-loaded.json"
SHORT_P99S = {(d, "short", "ttft_p99_s") for d in LAYOUTS}
OUTSIDE = {
    "from_q": SHORT_P99S,
    "own": {
        ("aggregated", "short", "ttft_p99_s"), ("aggregated", "long", "ttft_p50_s"),
        ("2p1d", "long", "ttft_p50_s"),
    },
}  # fmt: skip
"""With run Q's fit: 15 of 18, the short-request TTFT p99s too low (0.50-0.62; 0.34-0.42 before
the serving layer's intake was modelled, the prediction as made). Run R's own 1P1D fit: 15,
the long-prompt TTFT p50s of aggregated and 2P1D (1.23, 1.16) and aggregated's short TTFT p99
(0.61)."""
LANDS_WITHIN_S = 0.05
"""A short request 'a burst lands on': a long prompt is sent within this long after it."""


def _prof(how: str) -> SimProfile:
    return own_or_carried_fit(RUN_R, IDLE_R, how, FIT_Q)


def _rows(how: str) -> Rows:
    return own_or_carried_rows(RUN_R, IDLE_R, how, FIT_Q)


def test_run_r_predicted_beforehand_with_run_q_s_fit_and_by_its_own_fit() -> None:
    for how, expected in OUTSIDE.items():
        assert_outside(_rows(how), expected, f"{how}: ")


def test_every_median_predicted_beforehand_is_within_7_percent() -> None:
    """Run Q's fit, from another workload, predicts every bounded p50 (TTFT of both classes,
    ITL) of the three layouts within 7 % (0.94-0.99; the prediction as made, 0.96-1.03), half
    the issue's bound."""
    rows = _rows("from_q")
    for dep in LAYOUTS:
        for scope, field in BOUNDED:
            if field.endswith("p50_s"):
                assert abs(_ratio(rows, dep, scope, field) - 1) <= 0.07, (dep, scope, field)


def _landed_on(sent_s: float, longs_sent_s: list[float]) -> bool:
    return any(0 <= t - sent_s < LANDS_WITHIN_S for t in longs_sent_s)


def _measured_short_ttfts(dep: str) -> tuple[list[float], list[float]]:
    """The measured short requests' TTFTs (landed on, the rest), round by round."""
    report, _ = _report(RUN_R)
    requests: list[RequestResult] = report.policies[dep].requests or []
    landed: list[float] = []
    rest: list[float] = []
    for round_index in {r.round_index for r in requests}:
        rnd = [r for r in requests if r.round_index == round_index]
        longs = [r.start_s for r in rnd if r.request_class == "long"]
        for r in rnd:
            if r.request_class == "short" and r.ttft_s is not None:
                (landed if _landed_on(r.start_s, longs) else rest).append(r.ttft_s)
    return landed, rest


def _simulated_short_ttfts(dep: str) -> tuple[list[float], list[float]]:
    _, workload = _report(RUN_R)
    layout = LAYOUTS[dep]
    requests = workload_requests(workload, layout.engines[0].limits.block_size_tokens)
    landed: list[float] = []
    rest: list[float] = []
    for seed in range(RUNS):
        sim = Simulation(layout, _prof("from_q"), concurrency=workload.concurrency, seed=seed)
        results = sim.run(requests).results
        longs = [r.sent_s for r in results if r.request.request_class == "long"]
        for r in results:
            if r.request.request_class == "short" and r.ttft_s is not None:
                (landed if _landed_on(r.sent_s, longs) else rest).append(r.ttft_s)
    return landed, rest


def test_the_short_requests_a_burst_lands_on_are_the_slow_ones_measured_and_simulated() -> None:
    """Measured, in every layout, the three slowest short requests (the class's top 1 %) are
    among the 28 of 300 sent within 50 ms before a burst of long prompts, and those 28 take
    1.3x the others' TTFT at the median and more: the burst's prompts enter the serving layer
    (router, Ray Serve, the replicas' front ends, on the engines' two cores) while the short
    request is in flight. The model's intake holds their first chunk up (with run Q's fit:
    1.8-2.1x the others' median, against 1.3-1.8x measured; 1.03-1.29 of the measured median
    of those 28, 1P1D's the highest); before it, their simulated median was the others'.
    Their measured tail is longer still (p90 123-155 ms against 77-81 simulated, even with
    each prompt's intake spread), so the predicted short p99 stays 0.50-0.62 of measured."""
    for dep in LAYOUTS:
        landed, rest = _measured_short_ttfts(dep)
        slowest = sorted(landed + rest)[-3:]
        assert all(t in landed for t in slowest), dep
        assert statistics.median(landed) >= 1.3 * statistics.median(rest), dep
        sim_landed, sim_rest = _simulated_short_ttfts(dep)
        assert len(sim_landed) == RUNS * len(landed) // 2, dep  # 14 per round, both ways
        assert statistics.median(sim_landed) >= 1.3 * statistics.median(sim_rest), dep
        ratio = statistics.median(sim_landed) / statistics.median(landed)
        assert 1 / 1.5 <= ratio <= 1.5, (dep, ratio)
        assert _p90(sim_landed) < _p90(landed), dep  # the model's tail is still the thinner


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]
