"""Fitting the cpu_host block on a measured run (pdserve/sim/fit.py, fit_engine.py). The run
here is one the simulator made on a known host (tests/unit/sim/helpers.py: TRUTH_HOST), so
each fitted term can be checked against what it is fitted to: the spreads of two-hop stages,
the decode path's spread per path, the router's and the client's lines, the engines' loaded
step time, the prompt tokens' and a local prompt's factors, a local request's hops, the
host's stalls, and the host's speed between rounds."""

from __future__ import annotations

import functools
import math
import random

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import CLIENT_OVERHEAD, PolicyReport
from pdserve.sim import fit as fit_module
from pdserve.sim.fit import (
    HOPS_PER_STAGE,
    STALL_FIT_RUNS,
    _lognormal_sigma,
    _stalls,
    fit_host_contention,
)
from pdserve.sim.fit_engine import (
    PREFILL_FACTOR_RUNS,
    fit_engine_steps,
    fit_local_hop_load_factor,
    fit_local_prefill_load_factor,
    fit_prefill_step_factor,
)
from pdserve.sim.layout import SimLayout
from pdserve.sim.predict import predict, workload_requests
from pdserve.sim.profile import SimProfile
from tests.unit.sim.helpers import (
    LOCAL_PROFILE,
    RUN_WORKLOAD,
    TRUTH_HOST,
    local_layouts,
    measured_run,
)


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


def _inputs() -> tuple[SimProfile, SimLayout, BenchConfig, PolicyReport]:
    """The idle profile, the 1P1D layout, the run's workload and its measured 1P1D (a run
    simulated on a known host, standing in for a measured one).

    Both with the ITL guard off (router.routing.itl_slo_s null): the per-path terms are
    fitted where the request classes tell the paths apart, a class that prefilled on the
    decode engine throughout (no prefill stage) beside one that prefilled remotely. On this
    1P1D the cold-token rule alone prefills every short prompt locally; the guard, on by
    default, sends some of them to the prefill engine when the TTFT they would save there is
    less than what they would cost the streams decoding on it, and no class is local
    throughout."""
    measured = measured_run(itl_guard=False).policies["1p1d"]
    return LOCAL_PROFILE, local_layouts("1p1d", itl_guard=False)["1p1d"], RUN_WORKLOAD, measured


@functools.cache
def _fit(drop_classes: bool) -> tuple[SimProfile, PolicyReport]:
    """The host fitted on the run's 1P1D (without the host's stalls, fitted and tested on
    their own below)."""
    idle, layout, workload, measured = _inputs()
    if drop_classes:
        measured = measured.model_copy(update={"classes": None})
    fitted = fit_host_contention(idle, layout, workload, measured, host_cores=2, stalls=False)
    return fitted, measured


def test_the_decode_spread_is_fitted_per_path_when_the_classes_tell_them_apart() -> None:
    """On 1P1D short prompts all prefill on the decode engine (their class has no prefill
    stage) and long ones remotely: each path gets its decode_hops' spread, and the host's
    wider spread of local hops (TRUTH_HOST: 0.8 against 0.3) shows in them."""
    fitted, measured = _fit(drop_classes=False)
    classes = measured.classes or {}
    short = (classes["short"].stages or {})["decode_hops"]
    long = (classes["long"].stages or {})["decode_hops"]
    assert fitted.host.local_jitter_sigma == pytest.approx(
        _lognormal_sigma(short.p50_s or 0, short.p90_s, HOPS_PER_STAGE)
    )
    assert fitted.host.decode_jitter_sigma == pytest.approx(
        _lognormal_sigma(long.p50_s or 0, long.p90_s, HOPS_PER_STAGE)
    )
    assert fitted.host.local_sigma() > fitted.host.decode_jitter_sigma


def test_without_classes_one_decode_spread_serves_both_paths() -> None:
    fitted, measured = _fit(drop_classes=True)
    hops = (measured.stages or {})["decode_hops"]
    assert fitted.host.local_jitter_sigma is None
    assert fitted.host.decode_jitter_sigma == pytest.approx(
        _lognormal_sigma(hops.p50_s or 0, hops.p90_s, HOPS_PER_STAGE)
    )


def test_router_and_client_times_are_lines_in_the_prompt_s_tokens() -> None:
    """Long prompts spend longer in the router and outside it: the fit puts a line through
    the two classes' p50s, which recovers the host's loaded router line."""
    fitted, measured = _fit(drop_classes=False)
    assert fitted.host.router_per_token_s > 0 and fitted.host.client_per_token_s > 0
    for cls in (measured.classes or {}).values():
        tokens = round(cls.prompt_tokens_mean or 0)
        stages = cls.stages or {}
        router, client = stages["router_queue"].p50_s, stages[CLIENT_OVERHEAD].p50_s
        assert fitted.router_time_s(tokens) == pytest.approx(router, rel=0.01)
        assert fitted.host.client_time_s(tokens) == pytest.approx(client, rel=0.01)
    assert fitted.host.router_s == pytest.approx(TRUTH_HOST.router_s, rel=0.05)
    assert fitted.host.router_per_token_s == pytest.approx(TRUTH_HOST.router_per_token_s, rel=0.05)
    # One class (or none): the idle router line and the run's client_overhead p50.
    flat, measured = _fit(drop_classes=True)
    assert flat.host.router_s is None and flat.host.client_per_token_s == 0
    client = (measured.stages or {})[CLIENT_OVERHEAD].p50_s
    assert flat.host.client_s == client
    assert flat.router_time_s(1000) == LOCAL_PROFILE.router_time_s(1000)


def test_engine_steps_take_the_run_s_extra_time_under_load() -> None:
    """The run decoded slower than the idle profile's steps give: the fit adds the gap to
    every step (about the host's own extra), and the fitted profile's simulation then has
    the run's TPOT p50; without the extra it decodes too fast."""
    idle, layout, workload, measured = _inputs()
    fitted, _ = _fit(drop_classes=False)
    assert measured.tpot_p50_s is not None and idle.cpu_host is None
    assert fitted.host.engine_step_extra_s == pytest.approx(TRUTH_HOST.engine_step_extra_s, rel=0.3)
    simulated = predict("1p1d", layout, fitted, workload, runs=1).metrics.tpot_p50_s
    # The fit simulates before the hops' spreads are fitted; they move TPOT by a few percent.
    assert simulated == pytest.approx(measured.tpot_p50_s, rel=0.08)
    without_extra = fitted.with_host_terms(engine_step_extra_s=0.0)
    without = predict("1p1d", layout, without_extra, workload, runs=1).metrics.tpot_p50_s
    assert without is not None and without < 0.9 * measured.tpot_p50_s


def test_no_step_extra_when_the_run_decoded_as_fast_as_the_idle_profile() -> None:
    idle, layout, workload, measured = _inputs()
    requests = workload_requests(workload, layout.engines[0].limits.block_size_tokens)
    fast = measured.model_copy(update={"tpot_p50_s": 0.001})  # faster than any modelled step
    assert fit_engine_steps(idle, layout, workload, requests, fast)[0] == 0
    unmeasured = measured.model_copy(update={"tpot_p50_s": None, "tpot_p90_s": None})
    assert fit_engine_steps(idle, layout, workload, requests, unmeasured) == (0.0, 0.0)


def test_prompt_steps_take_the_factor_that_gives_the_run_s_prefill_median() -> None:
    """The fit scales the steps that compute prompt tokens until the simulated prefill
    stage's median is the run's: on the run's 1P1D, and on the same run with its prefill stage
    made 1.5x slower (a larger factor, again on the median), each pooled over
    PREFILL_FACTOR_RUNS simulated runs as the fit pools them. A run whose prompts prefilled
    faster than the idle profile allows keeps 1 (an engine is not faster under load), and
    one with no prefill stage keeps the profile's factor."""
    fitted, measured = _fit(drop_classes=False)
    _, layout, workload, _ = _inputs()
    stage = (measured.stages or {})["prefill"]
    assert stage.p50_s is not None and fitted.host.prefill_step_factor >= 1

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
    assert factor > 1.3 * fitted.host.prefill_step_factor
    trial = fitted.with_host_terms(prefill_step_factor=factor)
    assert simulated_p50(trial) == pytest.approx(1.5 * stage.p50_s, rel=0.1)
    fast = stage.model_copy(update={"p50_s": 0.001})
    run = measured.model_copy(update={"stages": {**(measured.stages or {}), "prefill": fast}})
    assert fit_prefill_step_factor(fitted, layout, workload, run) == 1.0
    stages = {k: v for k, v in (measured.stages or {}).items() if k != "prefill"}
    none = measured.model_copy(update={"stages": stages})
    kept = fitted.with_host_terms(prefill_step_factor=1.7)
    assert fit_prefill_step_factor(kept, layout, workload, none) == 1.7


def _with_local_stage(measured: PolicyReport, stage: str, p50_s: float) -> PolicyReport:
    """`measured` (the run's 1P1D, whose one local class is "short") with that class's
    `stage` p50 set to `p50_s`."""
    classes = measured.classes or {}
    local = [n for n, m in classes.items() if "prefill" not in (m.stages or {})]
    assert local == ["short"]
    short = classes["short"]
    moved = (short.stages or {})[stage].model_copy(update={"p50_s": p50_s})
    cls = short.model_copy(update={"stages": {**(short.stages or {}), stage: moved}})
    return measured.model_copy(update={"classes": {**classes, "short": cls}})


def _simulated_stage_p50(profile: SimProfile, name: str, stage: str) -> float:
    """`stage`'s p50 of class `name` on the run's 1P1D simulated with `profile`, pooled over
    PREFILL_FACTOR_RUNS runs as the fit pools it."""
    _, layout, workload, _ = _inputs()
    pooled = predict("1p1d", layout, profile, workload, runs=PREFILL_FACTOR_RUNS)
    value = (pooled.classes[name].stages or {})[stage].p50_s
    assert value is not None
    return value


def test_local_prompts_take_the_factor_that_gives_the_run_s_first_step() -> None:
    """The fit scales a local prompt's fixed cost until the simulated first step of the run's
    locally prefilled class (the short prompts: no prefill stage) is the run's
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

    base_s = simulated_p50(fitted.with_host_terms(local_prefill_load_factor=1.0))
    slower = with_first_step(base_s + 0.003)
    factor = fit_local_prefill_load_factor(fitted, layout, workload, slower)
    assert factor > 1 + 0.002 / fitted.own_prompt_fixed_s()
    trial = fitted.with_host_terms(local_prefill_load_factor=factor)
    assert simulated_p50(trial) == pytest.approx(base_s + 0.003, rel=0.1)
    assert fit_local_prefill_load_factor(fitted, layout, workload, with_first_step(1e-4)) == 1.0
    kept = fitted.with_host_terms(local_prefill_load_factor=1.7)
    no_classes = measured.model_copy(update={"classes": None})
    assert fit_local_prefill_load_factor(kept, layout, workload, no_classes) == 1.7
    remote_only = measured.model_copy(
        update={"classes": {n: m for n, m in classes.items() if n not in local}}
    )
    assert fit_local_prefill_load_factor(kept, layout, workload, remote_only) == 1.7


def test_the_client_s_spread_is_the_classes_mean() -> None:
    """One log-normal sigma for the client's time, the mean of the two classes' (each from
    its client_overhead p90 / p50)."""
    fitted, measured = _fit(drop_classes=False)
    sigmas = [
        _lognormal_sigma(s.p50_s or 0.0, s.p90_s)
        for m in (measured.classes or {}).values()
        if (s := (m.stages or {})[CLIENT_OVERHEAD]) is not None
    ]
    assert len(sigmas) == 2 and fitted.host.client_jitter_sigma == pytest.approx(sum(sigmas) / 2)
    assert fitted.host.client_jitter_sigma == pytest.approx(
        TRUTH_HOST.client_jitter_sigma, abs=0.15
    )
    flat, measured = _fit(drop_classes=True)
    hops = (measured.stages or {})[CLIENT_OVERHEAD]
    assert flat.host.client_jitter_sigma == pytest.approx(
        _lognormal_sigma(hops.p50_s or 0, hops.p90_s)
    )


def test_the_host_s_stalls_are_recovered_from_the_streams_they_shaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Streams simulated with known stalls (2 per second, 10 ms median) stand in for the
    measurement: the fit finds those stalls again from ITL p90/p99 and TPOT p50, and finds
    none in streams simulated without any (on a coarser grid than the fit's own, for time)."""
    monkeypatch.setattr(fit_module, "STALL_RATES_PER_S", (0.0, 1.0, 2.0, 4.0))
    monkeypatch.setattr(fit_module, "STALL_MEDIANS_S", (0.01, 0.02))
    fitted, measured = _fit(drop_classes=False)
    _, layout, workload, _ = _inputs()
    for rate_per_s, median_s in ((2.0, 0.01), (0.0, 0.0)):
        truth = fitted.with_host_terms(
            host_stall_rate_per_s=rate_per_s, host_stall_median_s=median_s
        )
        m = predict("1p1d", layout, truth, workload, runs=STALL_FIT_RUNS).metrics
        streams = {f: getattr(m, f) for f in ("itl_p90_s", "itl_p99_s", "tpot_p50_s")}
        found = _stalls(fitted, layout, workload, measured.model_copy(update=streams))
        assert found == (rate_per_s, median_s)


def test_local_hops_take_the_factor_that_gives_the_run_s_decode_hops() -> None:
    """The fit scales a local request's hop until the simulated decode_hops of the run's
    locally prefilled class (the short prompts) are the run's p50: with them made 1.5x
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

    idle = fitted.with_host_terms(local_hop_load_factor=1.0)
    base_s = simulated_p50(idle, "short")
    factor = fit_local_hop_load_factor(idle, layout, workload, with_hops(1.5 * base_s))
    assert factor > 1.3
    trial = idle.with_host_terms(local_hop_load_factor=factor)
    assert trial.loaded_local_hop_s() == pytest.approx(factor * idle.loaded_local_hop_s())
    assert simulated_p50(trial, "short") == pytest.approx(1.5 * base_s, rel=0.1)
    assert simulated_p50(trial, "long") == pytest.approx(simulated_p50(idle, "long"), rel=0.1)
    assert fit_local_hop_load_factor(idle, layout, workload, with_hops(0.5 * base_s)) == 1.0
    kept = fitted.with_host_terms(local_hop_load_factor=1.7)
    no_classes = measured.model_copy(update={"classes": None})
    assert fit_local_hop_load_factor(kept, layout, workload, no_classes) == 1.7
    remote_only = measured.model_copy(
        update={"classes": {n: m for n, m in classes.items() if n not in local}}
    )
    assert fit_local_hop_load_factor(kept, layout, workload, remote_only) == 1.7


def test_the_pooled_steps_are_fitted_at_the_spread_of_speeds_between_rounds() -> None:
    """With `round_speed_sigma` set (as the fit sets it first, from the run's rounds), the
    pooled simulations the later steps are fitted on run at several speeds, so the prompt
    tokens' factor lands elsewhere than at one speed."""
    fitted, measured = _fit(drop_classes=False)
    _, layout, workload, _ = _inputs()
    steady = fit_prefill_step_factor(fitted, layout, workload, measured)
    spread = fitted.with_host_terms(round_speed_sigma=0.3)
    assert fit_prefill_step_factor(spread, layout, workload, measured) != steady
