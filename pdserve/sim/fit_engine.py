"""The engines' terms under load, fitted by simulating a measured run (pure): the extra step
time and the host's speed spread (TPOT), the prompt tokens' slow-down (the prefill stage), a
local prompt's fixed cost (the first step of locally prefilled classes) and a local request's
hops (their decode_hops). Called by `fit.fit_host_contention`, which fits the serving layer
around them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import Metrics, PolicyReport
from pdserve.sim.layout import SimLayout
from pdserve.sim.predict import predict, workload_requests
from pdserve.sim.profile import SimProfile
from pdserve.sim.report import sim_metrics
from pdserve.sim.simulator import Simulation
from pdserve.sim.workload import SimRequest

STEP_EXTRA_ROUNDS = 3
"""Simulations `_step_extra_s` corrects its estimate with (each adds the gap left between the
simulated and the measured TPOT p50; on the recorded runs the result is within 5 % of it)."""


STEP_SPEED_SIGMAS = (0.0, 0.1, 0.2, 0.3)
"""The grid `fit_engine_steps` searches for `step_speed_sigma`. It stops at 0.3: a run's TPOT p90
also carries what the model leaves out (batches that grow, stalls), which a wider spread on
every step would take in."""
TPOT_TARGETS = ("tpot_p50_s", "tpot_p90_s")
"""The measured TPOT percentiles `fit_engine_steps` matches."""


SLOW_PROFILE_TOLERANCE = 0.15
"""How much slower than the run the idle profile's decode may be (`idle_steps_slower_than_run`)
before `pdserve simulate --fit-host-on` warns."""


def idle_steps_slower_than_run(
    profile: SimProfile, layout: SimLayout, workload: BenchConfig, measured: PolicyReport
) -> tuple[float, float] | None:
    """(simulated, measured) TPOT p50 when the run decoded faster than the idle profile's
    engine steps allow: simulated with the idle steps alone (no step extra, no host speed
    spread, no stalls; the hops' terms, which do not time the steps, as they are), its TPOT
    p50 above the measured one by more than SLOW_PROFILE_TOLERANCE. An engine is not faster
    under load than idle, so the profile was taken while the host was slower than during the
    run (busy, or a VM still settling), and the fit cannot take the difference back (its
    step extra stops at 0). None otherwise, or when the run did not measure TPOT."""
    target_s = measured.tpot_p50_s
    if target_s is None or target_s <= 0:
        return None
    idle = profile.with_host_terms(
        engine_step_extra_s=0.0, step_speed_sigma=0.0, host_stall_rate_per_s=0.0
    )
    requests = workload_requests(workload, layout.engines[0].limits.block_size_tokens)
    outcome = Simulation(layout, idle, concurrency=workload.concurrency).run(requests)
    simulated_s = sim_metrics(outcome, workload)[0].tpot_p50_s
    if simulated_s is None or simulated_s <= target_s * (1 + SLOW_PROFILE_TOLERANCE):
        return None
    return simulated_s, target_s


def log_error(simulated: Metrics, targets: Sequence[tuple[str, float]]) -> float:
    """Sum of squared log ratios (simulated / measured) over `targets` ((Metrics field,
    measured seconds)); inf when the simulation lacks one of them."""
    error = 0.0
    for field, measured_s in targets:
        value_s = getattr(simulated, field)
        if value_s is None or value_s <= 0:
            return math.inf
        error += math.log(value_s / measured_s) ** 2
    return error


def fit_engine_steps(
    profile: SimProfile,
    layout: SimLayout,
    workload: BenchConfig,
    requests: Sequence[SimRequest],
    measured: PolicyReport,
) -> tuple[float, float]:
    """(engine_step_extra_s, step_speed_sigma): for each sigma of STEP_SPEED_SIGMAS,
    the step extra that makes the simulated TPOT p50 the measured run's (`_step_extra_s`);
    of those, the pair whose simulated TPOT p50 and p90 are closest to the run's (least
    sum of squared log ratios). (0, 0) when the run did not measure TPOT."""
    targets = [(f, v) for f in TPOT_TARGETS if (v := getattr(measured, f)) is not None and v > 0]
    if measured.tpot_p50_s is None or not targets:
        return 0.0, 0.0
    best: tuple[float, float, float] | None = None
    for sigma in STEP_SPEED_SIGMAS:
        trial = profile.with_host_terms(step_speed_sigma=sigma)
        extra_s, simulated = _step_extra_s(trial, layout, workload, requests, measured)
        if simulated is None:
            continue
        error = log_error(simulated, targets)
        if best is None or error < best[0]:
            best = (error, extra_s, sigma)
    return (0.0, 0.0) if best is None else (best[1], best[2])


def _step_extra_s(
    profile: SimProfile,
    layout: SimLayout,
    workload: BenchConfig,
    requests: Sequence[SimRequest],
    measured: PolicyReport,
) -> tuple[float, Metrics | None]:
    """The `engine_step_extra_s` that makes the simulated TPOT p50 the measured run's, and
    the simulated metrics with it: start at 0 and add the remaining gap (measured - simulated
    TPOT p50) each round, clamped at >= 0 (0 when the run did not measure TPOT). A decode
    step yields one token per sequence, so a TPOT gap is a per-step gap."""
    target_s = measured.tpot_p50_s
    extra_s = 0.0
    simulated: Metrics | None = None
    if target_s is None:
        return extra_s, simulated
    for _ in range(STEP_EXTRA_ROUNDS):
        trial = profile.with_host_terms(engine_step_extra_s=extra_s)
        outcome = Simulation(layout, trial, concurrency=workload.concurrency).run(requests)
        simulated = sim_metrics(outcome, workload)[0]
        if simulated.tpot_p50_s is None:
            return extra_s, None
        extra_s = max(0.0, extra_s + target_s - simulated.tpot_p50_s)
    trial = profile.with_host_terms(engine_step_extra_s=extra_s)
    outcome = Simulation(layout, trial, concurrency=workload.concurrency).run(requests)
    return extra_s, sim_metrics(outcome, workload)[0]


PREFILL_FACTOR_ROUNDS = 3
"""Simulations `fit_prefill_step_factor` corrects its factor with."""
PREFILL_FACTOR_RUNS = 8
"""Simulated runs pooled for each round of `fit_prefill_step_factor` (different draws). The
prefill stage's p50 of one simulated run stands on its hundred-odd remote prefills, which
move with the simulation's seed; a pool of 8 does not."""
MAX_PREFILL_STEP_FACTOR = 4.0
"""The most `fit_prefill_step_factor` returns (CpuHost.prefill_step_factor's bound)."""


def fit_prefill_step_factor(
    profile: SimProfile, layout: SimLayout, workload: BenchConfig, measured: PolicyReport
) -> float:
    """The `prefill_step_factor` that makes the simulated prefill stage's p50 (remote
    prefills: the prefill engine's time from scheduling the prompt to its end; pooled over
    PREFILL_FACTOR_RUNS simulated runs) the measured run's: start at the profile's and scale
    by measured / simulated each round, kept within
    [1, MAX_PREFILL_STEP_FACTOR] (an engine is not faster under load than idle). The
    profile's factor when the run or the simulation has no prefill stage.

    The factor slows only the prompt tokens' terms, not the stage's fixed costs, so three
    ratio rounds need not reach an exact match when those costs are a large share."""
    stage = (measured.stages or {}).get("prefill")
    target_s = stage.p50_s if stage is not None else None
    factor = profile.host.prefill_step_factor
    if target_s is None or target_s <= 0:
        return factor
    for _ in range(PREFILL_FACTOR_ROUNDS):
        trial = profile.with_host_terms(prefill_step_factor=factor)
        pooled = predict(layout.name, layout, trial, workload, runs=PREFILL_FACTOR_RUNS)
        simulated = (pooled.metrics.stages or {}).get("prefill")
        if simulated is None or simulated.p50_s is None or simulated.p50_s <= 0:
            return profile.host.prefill_step_factor
        factor = min(MAX_PREFILL_STEP_FACTOR, max(1.0, factor * target_s / simulated.p50_s))
    return factor


LOCAL_FACTOR_ROUNDS = 3
"""Simulations `fit_local_prefill_load_factor` corrects its factor with."""
MAX_LOCAL_PREFILL_LOAD_FACTOR = 8.0
"""The most `fit_local_prefill_load_factor` returns (CpuHost.local_prefill_load_factor's
bound)."""


def fit_local_prefill_load_factor(
    profile: SimProfile, layout: SimLayout, workload: BenchConfig, measured: PolicyReport
) -> float:
    """The `local_prefill_load_factor` that makes the simulated first step of the run's local
    request classes (those with no prefill stage: prefilled on their decode engine) the
    measured one: the mean over those classes of decode_first_token's p50, pooled over
    PREFILL_FACTOR_RUNS simulated runs. Each round moves the loaded fixed cost by measured -
    simulated (the step's other terms do not depend on it), kept within
    [1, MAX_LOCAL_PREFILL_LOAD_FACTOR] (not faster under load than idle). The profile's factor
    when the run has no local class or the simulation no such stage."""
    idle_s = profile.own_prompt_fixed_s()
    if idle_s <= 0:
        return profile.host.local_prefill_load_factor
    return _fit_local_factor(
        profile, layout, workload, measured,
        field="local_prefill_load_factor", stage="decode_first_token",
        upper=MAX_LOCAL_PREFILL_LOAD_FACTOR,
        next_factor=lambda factor, target_s, sim_s: factor + (target_s - sim_s) / idle_s,
    )  # fmt: skip


MAX_LOCAL_HOP_LOAD_FACTOR = 8.0
"""The most `fit_local_hop_load_factor` returns (CpuHost.local_hop_load_factor's bound)."""


def fit_local_hop_load_factor(
    profile: SimProfile, layout: SimLayout, workload: BenchConfig, measured: PolicyReport
) -> float:
    """The `local_hop_load_factor` that makes the simulated hops of the run's local request
    classes (those with no prefill stage) the measured ones: the mean over those classes of
    decode_hops' p50, pooled over PREFILL_FACTOR_RUNS simulated runs. Each round scales the
    factor by measured / simulated, kept within [1, MAX_LOCAL_HOP_LOAD_FACTOR] (not faster
    under load than idle). The profile's factor when the run has no local class or the
    simulation no such stage."""
    if profile.loaded_local_hop_s() <= 0:
        return profile.host.local_hop_load_factor
    return _fit_local_factor(
        profile, layout, workload, measured,
        field="local_hop_load_factor", stage="decode_hops", upper=MAX_LOCAL_HOP_LOAD_FACTOR,
        next_factor=lambda factor, target_s, sim_s: (
            factor * (target_s / sim_s) if sim_s > 0 else None
        ),
    )  # fmt: skip


def _fit_local_factor(
    profile: SimProfile,
    layout: SimLayout,
    workload: BenchConfig,
    measured: PolicyReport,
    *,
    field: str,
    stage: str,
    upper: float,
    next_factor: Callable[[float, float, float], float | None],
) -> float:
    """The factor `field` of the local path that brings the simulated `stage` p50 of the run's
    local classes (the mean over them, pooled over PREFILL_FACTOR_RUNS simulated runs) to the
    measured one: LOCAL_FACTOR_ROUNDS rounds of `next_factor(factor, measured, simulated)`,
    each kept within [1, `upper`]. The profile's factor when the run has no local class with
    that stage, the simulation lacks it, or `next_factor` gives None."""
    kept: float = getattr(profile.host, field)
    classes = _local_classes(measured, stage)
    if not classes:
        return kept
    target_s = statistics.fmean(_stage_p50_s(measured.classes or {}, classes, stage))
    factor = kept
    for _ in range(LOCAL_FACTOR_ROUNDS):
        trial = profile.with_host_terms(**{field: factor})
        pooled = predict(layout.name, layout, trial, workload, runs=PREFILL_FACTOR_RUNS)
        simulated = _stage_p50_s(pooled.classes, classes, stage)
        if len(simulated) < len(classes):
            return kept
        moved = next_factor(factor, target_s, statistics.fmean(simulated))
        if moved is None:
            return kept
        factor = min(upper, max(1.0, moved))
    return factor


def _local_classes(measured: PolicyReport, stage: str) -> list[str]:
    """The run's request classes prefilled on their decode engine (no prefill stage) whose
    `stage` p50 was measured."""
    return [
        name
        for name, m in (measured.classes or {}).items()
        if (m.stages or {}).get("prefill") is None
        and (stats := (m.stages or {}).get(stage)) is not None
        and stats.p50_s is not None
    ]


def _stage_p50_s(classes: Mapping[str, Metrics], names: Sequence[str], stage: str) -> list[float]:
    """`stage`'s p50 of each of the `names` classes that has one."""
    out: list[float] = []
    for name in names:
        m = classes.get(name)
        stats = (m.stages or {}).get(stage) if m is not None else None
        if stats is not None and stats.p50_s is not None:
            out.append(stats.p50_s)
    return out


MAX_LOCAL_INTAKE_PER_TOKEN_S = 0.001
"""The most `fit_local_intake_per_token` returns (CpuHost.local_intake_per_token_s's bound)."""


def fit_local_intake_per_token(
    profile: SimProfile, layout: SimLayout, workload: BenchConfig, measured: PolicyReport
) -> float:
    """The `local_intake_per_token_s` that makes the simulated decode_hops p50 of the run's
    longest local request class (no prefill stage; longest by its mean prompt tokens) the
    measured one, on a deployment whose local classes differ in prompt length (an aggregated
    one prefills every class itself). Each of LOCAL_FACTOR_ROUNDS rounds adds (measured -
    simulated) / the class's prompt tokens, kept within [0, MAX_LOCAL_INTAKE_PER_TOKEN_S]
    (pooled over PREFILL_FACTOR_RUNS simulated runs). The profile's value when the run has
    fewer than two local classes of different lengths or the simulation lacks the stage."""
    kept = profile.host.local_intake_per_token_s
    lengths = {
        name: m.prompt_tokens_mean
        for name in _local_classes(measured, "decode_hops")
        if (m := (measured.classes or {})[name]).prompt_tokens_mean
    }
    if len(set(lengths.values())) < 2:
        return kept
    longest = max(lengths, key=lambda name: lengths[name])
    [target_s] = _stage_p50_s(measured.classes or {}, [longest], "decode_hops")
    per_token_s = kept
    for _ in range(LOCAL_FACTOR_ROUNDS):
        trial = profile.with_host_terms(local_intake_per_token_s=per_token_s)
        pooled = predict(layout.name, layout, trial, workload, runs=PREFILL_FACTOR_RUNS)
        simulated = _stage_p50_s(pooled.classes, [longest], "decode_hops")
        if not simulated:
            return kept
        moved = per_token_s + (target_s - simulated[0]) / lengths[longest]
        per_token_s = min(MAX_LOCAL_INTAKE_PER_TOKEN_S, max(0.0, moved))
    return per_token_s
