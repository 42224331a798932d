"""The jitter fit: the simulation draws each hop of a measured two-hop stage on its own, so
the fitted sigma must make the *sum* of two draws spread like the measured stage; and the
decode path's spread is fitted per path (local or remote prefill) when a run tells them
apart."""

from __future__ import annotations

import functools
import math
import pathlib
import random

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import CLIENT_OVERHEAD, BenchReport, PolicyReport
from pdserve.config import load_config
from pdserve.sim.fit import (
    HOPS_PER_STAGE,
    STALL_FIT_RUNS,
    _lognormal_sigma,
    _stalls,
    fit_host_contention,
)
from pdserve.sim.fit_engine import (
    PREFILL_FACTOR_RUNS,
    fit_local_hop_load_factor,
    fit_local_prefill_load_factor,
    fit_prefill_step_factor,
)
from pdserve.sim.layout import SimLayout, layout_from_config
from pdserve.sim.predict import predict
from pdserve.sim.profile import SimProfile


@pytest.mark.parametrize("ratio", [1.3, 1.5, 2.0, 3.0])
def test_two_hop_sum_reproduces_the_measured_spread(ratio: float) -> None:
    sigma = _lognormal_sigma(0.010, 0.010 * ratio, num_terms=2)
    rng = random.Random(7)
    n = 100_000
    sums = sorted(math.exp(rng.gauss(0, sigma)) + math.exp(rng.gauss(0, sigma)) for _ in range(n))
    simulated = sums[int(0.90 * n)] / sums[n // 2]
    assert simulated == pytest.approx(ratio, rel=0.08)
    # Fitting the sum's spread to one term would have narrowed the tail.
    one = _lognormal_sigma(0.010, 0.010 * ratio)
    assert one < sigma


def test_no_spread_without_a_tail() -> None:
    assert _lognormal_sigma(0.010, 0.010, num_terms=2) == 0.0
    assert _lognormal_sigma(0.010, None, num_terms=2) == 0.0


FIXTURES = pathlib.Path(__file__).parent / "fixtures"
ROOT = pathlib.Path(__file__).resolve().parents[3]


def _inputs() -> tuple[SimProfile, SimLayout, BenchConfig, PolicyReport]:
    """The idle profile, the 1P1D layout, run A's workload and its measured 1P1D."""
    report = BenchReport.model_validate_json((FIXTURES / "mixed-3way-stages.json").read_text())
    workload = BenchConfig.model_validate({**report.config, "deployments": (), "json_path": None})
    layout = layout_from_config(load_config(ROOT / "deploy" / "local.yaml"), name="1p1d")
    idle = SimProfile.load(FIXTURES / "sim-profile-local.json")
    return idle, layout, workload, report.policies["1p1d"]


@functools.cache
def _fit(drop_classes: bool) -> tuple[SimProfile, PolicyReport]:
    """The serving layer fitted on run A's 1P1D (without the host's stalls, fitted and tested
    on their own below)."""
    idle, layout, workload, measured = _inputs()
    if drop_classes:
        measured = measured.model_copy(update={"classes": None})
    fitted = fit_host_contention(idle, layout, workload, measured, host_cores=2, stalls=False)
    return fitted, measured


def test_the_decode_spread_is_fitted_per_path_when_the_classes_tell_them_apart() -> None:
    """In the recorded 1P1D run short prompts all prefilled on the decode engine (their class
    has no prefill stage) and long ones remotely: each path gets its decode_hops' spread."""
    fitted, measured = _fit(drop_classes=False)
    classes = measured.classes or {}
    short = (classes["short"].stages or {})["decode_hops"]
    long = (classes["long"].stages or {})["decode_hops"]
    assert fitted.local_jitter_sigma == pytest.approx(
        _lognormal_sigma(short.p50_s or 0, short.p90_s, HOPS_PER_STAGE)
    )
    assert fitted.decode_jitter_sigma == pytest.approx(
        _lognormal_sigma(long.p50_s or 0, long.p90_s, HOPS_PER_STAGE)
    )
    assert fitted.local_jitter_sigma > 1.5 * fitted.decode_jitter_sigma  # p90/p50: 24/12, 44/29 ms


def test_without_classes_one_decode_spread_serves_both_paths() -> None:
    fitted, measured = _fit(drop_classes=True)
    hops = (measured.stages or {})["decode_hops"]
    assert fitted.local_jitter_sigma is None
    assert fitted.decode_jitter_sigma == pytest.approx(
        _lognormal_sigma(hops.p50_s or 0, hops.p90_s, HOPS_PER_STAGE)
    )


def test_router_and_client_times_are_lines_in_the_prompt_s_tokens() -> None:
    """Long prompts spend longer in the router (7 against 2 ms) and outside it (24 against
    8 ms) in the recorded run: the fit puts a line through the two classes' p50s."""
    fitted, measured = _fit(drop_classes=False)
    assert fitted.router_per_token_s > 0 and fitted.client_per_token_s > 0
    for cls in (measured.classes or {}).values():
        tokens = round(cls.prompt_tokens_mean or 0)
        stages = cls.stages or {}
        router, client = stages["router_queue"].p50_s, stages[CLIENT_OVERHEAD].p50_s
        assert fitted.router_time_s(tokens) == pytest.approx(router, rel=0.01)
        assert fitted.client_time_s(tokens) == pytest.approx(client, rel=0.01)
    # One class (or none): the idle router time and the run's client_overhead p50.
    flat, measured = _fit(drop_classes=True)
    assert flat.router_per_token_s == 0 and flat.client_per_token_s == 0
    client = (measured.stages or {})[CLIENT_OVERHEAD].p50_s
    assert flat.client_s == client
    assert flat.router_s == SimProfile.load(FIXTURES / "sim-profile-local.json").router_s


def test_engine_steps_take_the_run_s_extra_time_under_load() -> None:
    """The recorded 1P1D run decoded at 8.0 ms per token where the idle profile's steps give
    about 5.2: the fit adds the gap to every step, and the fitted profile's simulation then
    has the run's TPOT p50."""
    idle, layout, workload, measured = _inputs()
    fitted = fit_host_contention(idle, layout, workload, measured, host_cores=2, stalls=False)
    assert measured.tpot_p50_s is not None and idle.engine_step_extra_s == 0
    assert 0.001 < fitted.engine_step_extra_s < measured.tpot_p50_s
    simulated = predict("1p1d", layout, fitted, workload, runs=1).metrics.tpot_p50_s
    # The fit simulates before the hops' spreads are fitted; they move TPOT by a few percent.
    assert simulated == pytest.approx(measured.tpot_p50_s, rel=0.05)
    without_extra = fitted.model_copy(update={"engine_step_extra_s": 0.0})
    without = predict("1p1d", layout, without_extra, workload, runs=1).metrics.tpot_p50_s
    assert without is not None and without < 0.8 * measured.tpot_p50_s


def test_no_step_extra_when_the_run_decoded_as_fast_as_the_idle_profile() -> None:
    idle, layout, workload, measured = _inputs()
    fast = measured.model_copy(update={"tpot_p50_s": 0.001})  # faster than any modelled step
    unmeasured = measured.model_copy(update={"tpot_p50_s": None})
    for m in (fast, unmeasured):
        fitted = fit_host_contention(idle, layout, workload, m, host_cores=2, stalls=False)
        assert fitted.engine_step_extra_s == 0


def test_prompt_steps_take_the_factor_that_gives_the_run_s_prefill_median() -> None:
    """The fit scales the steps that compute prompt tokens until the simulated prefill
    stage's median is the run's: on run A's 1P1D, and on the same run with its prefill stage
    made 1.5x slower (a larger factor, again on the median), each pooled over
    PREFILL_FACTOR_RUNS simulated runs as the fit pools them. A run whose prompts prefilled
    faster than the idle profile allows keeps 1 (an engine is not faster under load), and
    one with no prefill stage keeps the profile's factor."""
    fitted, measured = _fit(drop_classes=False)
    _, layout, workload, _ = _inputs()
    stage = (measured.stages or {})["prefill"]
    assert stage.p50_s is not None and fitted.prefill_step_factor >= 1

    def simulated_p50(profile: SimProfile) -> float:
        pooled = predict("1p1d", layout, profile, workload, runs=PREFILL_FACTOR_RUNS)
        stages = pooled.metrics.stages or {}
        value = stages["prefill"].p50_s
        assert value is not None
        return value

    assert simulated_p50(fitted) == pytest.approx(stage.p50_s, rel=0.1)
    slower = stage.model_copy(update={"p50_s": 1.5 * stage.p50_s})
    run = measured.model_copy(update={"stages": {**(measured.stages or {}), "prefill": slower}})
    factor = fit_prefill_step_factor(fitted, layout, workload, run)
    assert factor > 1.3 * fitted.prefill_step_factor
    trial = fitted.model_copy(update={"prefill_step_factor": factor})
    assert simulated_p50(trial) == pytest.approx(1.5 * stage.p50_s, rel=0.1)
    fast = stage.model_copy(update={"p50_s": 0.001})
    run = measured.model_copy(update={"stages": {**(measured.stages or {}), "prefill": fast}})
    assert fit_prefill_step_factor(fitted, layout, workload, run) == 1.0
    stages = {k: v for k, v in (measured.stages or {}).items() if k != "prefill"}
    none = measured.model_copy(update={"stages": stages})
    kept = fitted.model_copy(update={"prefill_step_factor": 1.7})
    assert fit_prefill_step_factor(kept, layout, workload, none) == 1.7


def _with_local_stage(measured: PolicyReport, stage: str, p50_s: float) -> PolicyReport:
    """`measured` (run A's 1P1D, whose one local class is "short") with that class's `stage`
    p50 set to `p50_s`."""
    classes = measured.classes or {}
    local = [n for n, m in classes.items() if "prefill" not in (m.stages or {})]
    assert local == ["short"]
    short = classes["short"]
    moved = (short.stages or {})[stage].model_copy(update={"p50_s": p50_s})
    cls = short.model_copy(update={"stages": {**(short.stages or {}), stage: moved}})
    return measured.model_copy(update={"classes": {**classes, "short": cls}})


def _simulated_stage_p50(profile: SimProfile, name: str, stage: str) -> float:
    """`stage`'s p50 of class `name` on run A's 1P1D simulated with `profile`, pooled over
    PREFILL_FACTOR_RUNS runs as the fit pools it."""
    _, layout, workload, _ = _inputs()
    pooled = predict("1p1d", layout, profile, workload, runs=PREFILL_FACTOR_RUNS)
    value = (pooled.classes[name].stages or {})[stage].p50_s
    assert value is not None
    return value


def test_local_prompts_take_the_factor_that_gives_the_run_s_first_step() -> None:
    """The fit scales a local prompt's fixed cost until the simulated first step of the run's
    locally prefilled class (run A's short prompts: no prefill stage) is the run's
    decode_first_token p50: with that step made 3 ms slower, the factor grows and the
    simulation, pooled as the fit pools it, lands on the new median. A run whose local first
    step is faster than the idle cost allows keeps 1 (not faster under load than idle); a
    run without classes, or without a local one, keeps the profile's factor."""
    fitted, measured = _fit(drop_classes=False)
    _, layout, workload, _ = _inputs()
    classes = measured.classes or {}
    local = ["short"]

    def with_first_step(p50_s: float) -> PolicyReport:
        return _with_local_stage(measured, "decode_first_token", p50_s)

    def simulated_p50(profile: SimProfile) -> float:
        return _simulated_stage_p50(profile, "short", "decode_first_token")

    base_s = simulated_p50(fitted.model_copy(update={"local_prefill_load_factor": 1.0}))
    slower = with_first_step(base_s + 0.003)
    factor = fit_local_prefill_load_factor(fitted, layout, workload, slower)
    assert factor > 1 + 0.002 / fitted.own_prompt_fixed_s()
    trial = fitted.model_copy(update={"local_prefill_load_factor": factor})
    assert simulated_p50(trial) == pytest.approx(base_s + 0.003, rel=0.1)
    assert fit_local_prefill_load_factor(fitted, layout, workload, with_first_step(1e-4)) == 1.0
    kept = fitted.model_copy(update={"local_prefill_load_factor": 1.7})
    no_classes = measured.model_copy(update={"classes": None})
    assert fit_local_prefill_load_factor(kept, layout, workload, no_classes) == 1.7
    remote_only = measured.model_copy(
        update={"classes": {n: m for n, m in classes.items() if n not in local}}
    )
    assert fit_local_prefill_load_factor(kept, layout, workload, remote_only) == 1.7


def test_the_client_s_spread_is_the_classes_mean() -> None:
    """client_overhead p50 / p90 was 7 / 13 ms for short and 24 / 49 ms for long prompts in
    the recorded 1P1D run: one log-normal sigma, the mean of the two classes'."""
    fitted, measured = _fit(drop_classes=False)
    sigmas = [
        _lognormal_sigma(s.p50_s or 0.0, s.p90_s)
        for m in (measured.classes or {}).values()
        if (s := (m.stages or {})[CLIENT_OVERHEAD]) is not None
    ]
    assert len(sigmas) == 2 and fitted.client_jitter_sigma == pytest.approx(sum(sigmas) / 2)
    assert 0.2 < fitted.client_jitter_sigma < 1.0
    flat, measured = _fit(drop_classes=True)
    hops = (measured.stages or {})[CLIENT_OVERHEAD]
    assert flat.client_jitter_sigma == pytest.approx(_lognormal_sigma(hops.p50_s or 0, hops.p90_s))


def test_the_host_s_stalls_are_recovered_from_the_streams_they_shaped() -> None:
    """Streams simulated with known stalls (2 per second, 10 ms median) stand in for the
    measurement: the fit finds those stalls again from ITL p90/p99 and TPOT p50, and finds
    none in streams simulated without any."""
    fitted, measured = _fit(drop_classes=False)
    _, layout, workload, _ = _inputs()
    for rate_per_s, median_s in ((2.0, 0.01), (0.0, 0.0)):
        truth = fitted.model_copy(
            update={"host_stall_rate_per_s": rate_per_s, "host_stall_median_s": median_s}
        )
        m = predict("1p1d", layout, truth, workload, runs=STALL_FIT_RUNS).metrics
        streams = {f: getattr(m, f) for f in ("itl_p90_s", "itl_p99_s", "tpot_p50_s")}
        found = _stalls(fitted, layout, workload, measured.model_copy(update=streams))
        assert found == (rate_per_s, median_s)


def test_stalls_lengthen_the_stream_tail_the_fit_matches() -> None:
    """Fitted on run A's 1P1D with its stalls, the simulated ITL p99 is closer to the
    measured one than without them (0.075 s measured)."""
    idle, layout, workload, measured = _inputs()
    fitted = fit_host_contention(idle, layout, workload, measured, host_cores=2)
    assert fitted.host_stall_rate_per_s > 0 and fitted.host_stall_median_s > 0
    without = fitted.model_copy(update={"host_stall_rate_per_s": 0.0})
    assert measured.itl_p99_s is not None

    def error(p: SimProfile) -> float:
        itl = predict("1p1d", layout, p, workload, runs=STALL_FIT_RUNS).metrics.itl_p99_s
        assert itl is not None and measured.itl_p99_s is not None
        return abs(math.log(itl / measured.itl_p99_s))

    assert error(fitted) < error(without)


def test_local_hops_take_the_factor_that_gives_the_run_s_decode_hops() -> None:
    """The fit scales a local request's hop until the simulated decode_hops of the run's
    locally prefilled class (run A's short prompts) are the run's p50: with them made 1.5x
    the simulated idle-hop value, the factor grows and the simulation, pooled as the fit pools
    it, lands on the new median; the simulator charges the scaled hop only to local requests
    (the remote class's decode_hops move by under a tenth, through the timing of the batches
    they share, while the local ones grow by half). A run whose local hops are faster than idle
    keeps 1; a run without classes, or without a local one, keeps the profile's factor."""
    fitted, measured = _fit(drop_classes=False)
    _, layout, workload, _ = _inputs()
    classes = measured.classes or {}
    local = ["short"]

    def with_hops(p50_s: float) -> PolicyReport:
        return _with_local_stage(measured, "decode_hops", p50_s)

    def simulated_p50(profile: SimProfile, name: str) -> float:
        return _simulated_stage_p50(profile, name, "decode_hops")

    idle = fitted.model_copy(update={"local_hop_load_factor": 1.0})
    base_s = simulated_p50(idle, "short")
    factor = fit_local_hop_load_factor(idle, layout, workload, with_hops(1.5 * base_s))
    assert factor > 1.3
    trial = idle.model_copy(update={"local_hop_load_factor": factor})
    assert trial.loaded_local_hop_s() == pytest.approx(factor * idle.loaded_local_hop_s())
    assert simulated_p50(trial, "short") == pytest.approx(1.5 * base_s, rel=0.1)
    assert simulated_p50(trial, "long") == pytest.approx(simulated_p50(idle, "long"), rel=0.1)
    assert fit_local_hop_load_factor(idle, layout, workload, with_hops(0.5 * base_s)) == 1.0
    kept = fitted.model_copy(update={"local_hop_load_factor": 1.7})
    no_classes = measured.model_copy(update={"classes": None})
    assert fit_local_hop_load_factor(kept, layout, workload, no_classes) == 1.7
    remote_only = measured.model_copy(
        update={"classes": {n: m for n, m in classes.items() if n not in local}}
    )
    assert fit_local_hop_load_factor(kept, layout, workload, remote_only) == 1.7


def test_the_spread_between_rounds_is_set_before_the_pooled_steps_and_kept() -> None:
    """`round_speed_sigma` given: the fitted profile has it, and the pooled steps fitted after
    it (here the prompt tokens' factor) see a pool of runs at several speeds, so they
    land elsewhere than without it; None keeps the profile's."""
    idle, layout, workload, measured = _inputs()
    spread = fit_host_contention(
        idle, layout, workload, measured, host_cores=2, stalls=False, round_speed_sigma=0.2
    )
    steady, _ = _fit(False)
    assert spread.round_speed_sigma == 0.2 and steady.round_speed_sigma == 0.0
    assert spread.engine_step_extra_s == steady.engine_step_extra_s  # single-run steps: as before
    assert spread.prefill_step_factor != steady.prefill_step_factor
