"""Fit the simulator's serving latencies: from `pdserve profile` samples on an idle cluster,
and their growth under load from a measured run's timeline (pure)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import CLIENT_OVERHEAD, Metrics, PolicyReport, StageStats
from pdserve.profiling.samples import LocalPrefillSample, ServingSample
from pdserve.router.policy.cost_model import CostModel
from pdserve.sim.cpu_host import CpuHost
from pdserve.sim.fit_engine import (
    fit_engine_steps,
    fit_local_hop_load_factor,
    fit_local_intake_per_token,
    fit_local_prefill_load_factor,
    fit_prefill_step_factor,
    log_error,
)
from pdserve.sim.layout import SimLayout
from pdserve.sim.predict import predict, workload_requests
from pdserve.sim.profile import SimProfile
from pdserve.sim.simulator import Simulation


def fit_sim_profile(
    cost_model: CostModel,
    serving: Sequence[ServingSample],
    *,
    source: str,
    local_prefill: Sequence[LocalPrefillSample] = (),
) -> SimProfile:
    """The simulator profile of an idle cluster: the fitted engine `cost_model`, plus, from
    the serving samples, the router's time before dispatch and the KV transfer as lines in the
    prompt's tokens (least squares of router_queue and of the decode engine's KV wait, each
    clamped at >= 0: the median and no per-token term when the slope comes out negative), and
    one hop (median of the prefill and decode round trips / 4). The transfer's per-token term
    replaces the cost model's kv_transfer_per_token_s. The `local_prefill` samples (prompts
    prefilled on the decode engine) give the local path's fixed cost and hop (None without
    such samples). No `cpu_host` block: that is fitted on a loaded run (`fit_host_contention`).
    Raises ValueError with fewer than 2 samples or one prompt length only."""
    if len(serving) < 2 or len({s.num_prompt_tokens for s in serving}) < 2:
        raise ValueError(
            "need serving samples of at least two prompt lengths (remote prefills) to fit the "
            "KV transfer; is local_prefill_max_cold_tokens above every profiled length?"
        )
    tokens = [s.num_prompt_tokens for s in serving]
    kv_fixed_s, kv_per_token_s = _clamped_line(tokens, [s.kv_wait_s for s in serving])
    router_s, router_per_token_s = _clamped_line(tokens, [s.router_s for s in serving])
    hops = [(s.prefill_hops_s + s.decode_hops_s) / 4 for s in serving]
    return SimProfile(
        cost_model=cost_model.model_copy(update={"kv_transfer_per_token_s": kv_per_token_s}),
        router_s=router_s,
        router_per_token_s=router_per_token_s,
        hop_s=statistics.median(hops),
        kv_transfer_fixed_s=kv_fixed_s,
        local_prefill_fixed_s=local_prefill_fixed_s(cost_model, local_prefill),
        local_hop_s=local_hop_s(local_prefill),
        source=source,
    )


def _clamped_line(x: Sequence[int], y: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (x, y), both >= 0: with a negative
    slope, (median of y, 0)."""
    design = np.array([[1.0, float(v)] for v in x])
    (intercept, slope), *_ = np.linalg.lstsq(design, np.array(y), rcond=None)
    if slope < 0:
        return float(np.median(y)), 0.0
    return max(0.0, float(intercept)), float(slope)


def local_prefill_fixed_s(
    cost_model: CostModel, samples: Sequence[LocalPrefillSample]
) -> float | None:
    """The fixed cost of a prompt an engine prefills for its own decoding, in the simulator's
    step model (engine.py: a step costs decode_base_s once, a prompt's fixed cost less that
    base, its token terms, and the decoding streams' terms): the median over the measured
    first steps of the step less `cost_model`'s per-token and attention terms for the prompt
    and less its decoding streams' per-sequence and context terms. The samples taken beside
    a decode batch are used when there are any: under load a short prompt mostly joins
    running streams, and alone on an idle engine its step also pays the engine's wake-up.
    Clamped at >= 0; None without samples. The per-token terms are the prefill pool's fit:
    these prompts are too short to fit their own."""
    if not samples:
        return None
    beside = [s for s in samples if s.batch_size > 0] or list(samples)
    return max(0.0, statistics.median(_own_fixed_s(cost_model, s) for s in beside))


def local_hop_s(samples: Sequence[LocalPrefillSample]) -> float | None:
    """One hop of the local-prefill path: half the median decode_hops of the local prefills
    sent alone (on the idle cluster, as hop_s is measured); None without such samples."""
    hops = [s.decode_hops_s for s in samples if s.batch_size == 0 and s.decode_hops_s is not None]
    return statistics.median(hops) / 2 if hops else None


def _own_fixed_s(cost_model: CostModel, sample: LocalPrefillSample) -> float:
    """One sample's step less its prompt's token terms and its decoding streams' terms."""
    uncached = sample.num_prompt_tokens - sample.num_cached_tokens
    tokens_s = cost_model.est_prefill_s(uncached, sample.num_cached_tokens)
    tokens_s -= cost_model.fixed_overhead_s
    streams_s = 0.0
    if sample.batch_size:
        streams_s = cost_model.est_decode_step_s(sample.batch_size, sample.context_tokens)
        streams_s -= cost_model.decode_base_s
    return sample.first_token_s - tokens_s - streams_s


Z90 = 1.2816
"""The standard normal's 90th percentile: a log-normal's p90 / p50 is exp(Z90 x sigma). The
spreads are fitted to the body of each measured distribution (p90 / p50); its rare, long
tail is the host's stalls (`_stalls`), not a wider spread on every hop."""


def fit_host_contention(
    profile: SimProfile,
    layout: SimLayout,
    workload: BenchConfig,
    measured: PolicyReport,
    *,
    host_cores: int,
    stalls: bool = True,
    round_speed_sigma: float | None = None,
    local_lengths: tuple[SimLayout, PolicyReport] | None = None,
) -> SimProfile:
    """`profile` with a `cpu_host` block fitted on a measured run of this host, in order:
    - `host_cores`; the run's router line (router_queue p50 through its request classes'
      mean prompt tokens, when it has classes of different lengths; else the idle line is
      kept) and the client's (client_overhead: its line, or its p50), and the client's
      spread (`client_jitter_sigma`, p90 / p50, the mean over the classes);
    - `round_speed_sigma` when given (the spread of the run's rounds, set first so the pooled
      simulations below run at the spread of speeds the measured rounds did);
    - `engine_step_extra_s` and `step_speed_sigma`, which make the simulated TPOT p50 and p90
      the run's as near as the grid allows (`fit_engine_steps`);
    - `host_contention`: one Ray Serve hop under load as long as the run's median hop
      ((prefill_hops + decode_hops) p50 / 4) against the idle hop, divided by the mean
      fraction of host cores the simulation finds busy at its hops; the hops' spreads from
      their p90 / p50 (`decode_jitter_sigma` and `local_jitter_sigma` per path when the run's
      classes tell local and remote prefills apart);
    - `prefill_step_factor` (the prefill stage's p50), then with `stalls` the host's stalls
      that bring the simulated streams closest to the run's (ITL p90, p99, TPOT p50), then
      `local_prefill_load_factor` and `local_hop_load_factor` (the local classes' first step
      and hops);
    - with `local_lengths` (the same run's aggregated deployment: layout, measured), the
      `local_intake_per_token_s` that gives its longest class's decode_hops, then the hop
      factor again.
    Raises ValueError when the run has no remote-prefill timeline (aggregated, or not
    pdserve) or is a trace replay (fit on a mixed or synthetic run)."""
    if workload.workload == "trace":
        raise ValueError("fit the host on a mixed or synthetic run, not a trace replay")
    stages = measured.stages or {}
    pre, dec = stages.get("prefill_hops"), stages.get("decode_hops")
    if pre is None or dec is None or pre.p50_s is None or dec.p50_s is None:
        raise ValueError("the measured run has no remote-prefill timeline to fit hops from")
    loaded_hop_s = (pre.p50_s + dec.p50_s) / 4
    client = stages.get(CLIENT_OVERHEAD)
    client_p50_s = client.p50_s if client is not None and client.p50_s is not None else 0.0
    router = _line_by_prompt_tokens(measured, "router_queue")
    client_s, client_per_token_s = _line_by_prompt_tokens(measured, CLIENT_OVERHEAD) or (
        client_p50_s,
        0.0,
    )
    host = CpuHost(
        host_cores=host_cores,
        router_s=None if router is None else router[0],
        router_per_token_s=0.0 if router is None else router[1],
        client_s=client_s,
        client_per_token_s=client_per_token_s,
        round_speed_sigma=round_speed_sigma or 0.0,
    )
    base = profile.with_host(host)
    requests = workload_requests(workload, layout.engines[0].limits.block_size_tokens)
    extra_s, speed_sigma = fit_engine_steps(base, layout, workload, requests, measured)
    base = base.with_host_terms(engine_step_extra_s=extra_s, step_speed_sigma=speed_sigma)
    sim = Simulation(layout, base, concurrency=workload.concurrency)
    sim.run(requests)
    busy = statistics.fmean(sim.busy_samples) / host_cores if sim.busy_samples else 0.0
    ratio = loaded_hop_s / profile.hop_s if profile.hop_s > 0 else 1.0
    contention = max(0.0, (ratio - 1) / busy) if busy > 0 else 0.0
    sigma = _lognormal_sigma(pre.p50_s, pre.p90_s, HOPS_PER_STAGE)
    decode_sigma = _lognormal_sigma(dec.p50_s, dec.p90_s, HOPS_PER_STAGE)
    local_sigma = None
    local, remote = _decode_hops_by_path(measured)
    if local is not None and remote is not None:
        decode_sigma = _lognormal_sigma(remote.p50_s or 0.0, remote.p90_s, HOPS_PER_STAGE)
        local_sigma = _lognormal_sigma(local.p50_s or 0.0, local.p90_s, HOPS_PER_STAGE)
    fitted = base.with_host_terms(
        client_jitter_sigma=_class_spread(measured, CLIENT_OVERHEAD),
        host_contention=contention,
        serving_jitter_sigma=sigma,
        decode_jitter_sigma=decode_sigma,
        local_jitter_sigma=local_sigma,
    ).model_copy(update={"source": f"{profile.source}; CPU host fitted on {layout.name}"})
    # With the hops' spreads in: they decide which prompts of a burst reach the prefill
    # engine together and share its steps.
    factor = fit_prefill_step_factor(fitted, layout, workload, measured)
    fitted = fitted.with_host_terms(prefill_step_factor=factor)
    if stalls:
        rate_per_s, median_s = _stalls(fitted, layout, workload, measured)
        fitted = fitted.with_host_terms(
            host_stall_rate_per_s=rate_per_s, host_stall_median_s=median_s
        )
    # Last, with everything a local prompt waits on in (the steps and stalls around it).
    load_factor = fit_local_prefill_load_factor(fitted, layout, workload, measured)
    fitted = fitted.with_host_terms(local_prefill_load_factor=load_factor)
    hop_factor = fit_local_hop_load_factor(fitted, layout, workload, measured)
    fitted = fitted.with_host_terms(local_hop_load_factor=hop_factor)
    if local_lengths is None:
        return fitted
    other_layout, other_measured = local_lengths
    per_token_s = fit_local_intake_per_token(fitted, other_layout, workload, other_measured)
    fitted = fitted.with_host_terms(local_intake_per_token_s=per_token_s)
    hop_factor = fit_local_hop_load_factor(fitted, layout, workload, measured)
    return fitted.with_host_terms(local_hop_load_factor=hop_factor)


STALL_RATES_PER_S = (0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0)
STALL_MEDIANS_S = (0.005, 0.01, 0.02, 0.04)
"""The grid `_stalls` searches: stalls per second and their median length (seconds)."""
STALL_FIT_RUNS = 8
"""Simulated runs pooled for each point of the grid (the tails it compares are p90s and p99s:
one run's are a handful of gaps deep)."""


def _stalls(
    profile: SimProfile, layout: SimLayout, workload: BenchConfig, measured: PolicyReport
) -> tuple[float, float]:
    """(host_stall_rate_per_s, host_stall_median_s): of the grid, the stalls whose simulated
    streams are closest to the measured run's: the least sum of squared log ratios
    (simulated / measured) of the ITL p90 and p99 and the TPOT p50 (`_stream_targets`), each
    simulation pooled over STALL_FIT_RUNS runs. (0, 0) when the run measured none of them.
    The streams, not the TTFT p99s: an ITL p99 stands on thousands of gaps, a request class's
    TTFT p99 on its few slowest requests."""
    targets = _stream_targets(measured)
    if not targets:
        return 0.0, 0.0
    best: tuple[float, float, float] | None = None
    for rate_per_s in STALL_RATES_PER_S:
        for median_s in STALL_MEDIANS_S if rate_per_s > 0 else (0.0,):
            trial = profile.with_host_terms(
                host_stall_rate_per_s=rate_per_s, host_stall_median_s=median_s
            )
            simulated = predict(layout.name, layout, trial, workload, runs=STALL_FIT_RUNS)
            error = log_error(simulated.metrics, targets)
            if best is None or error < best[0]:
                best = (error, rate_per_s, median_s)
    return (0.0, 0.0) if best is None else (best[1], best[2])


def _stream_targets(measured: PolicyReport) -> list[tuple[str, float]]:
    """(Metrics field, measured seconds) of what the stalls are fitted to: the ITL p90 and p99
    and the TPOT p50 of all requests, those the run measured."""
    return [
        (field, value_s)
        for field in ("itl_p90_s", "itl_p99_s", "tpot_p50_s")
        if (value_s := getattr(measured, field)) is not None and value_s > 0
    ]


def _class_spread(measured: PolicyReport, stage: str) -> float:
    """The sigma of a log-normal with `stage`'s p90 / p50, the mean over the run's request
    classes (the run's own stage when it has none; 0 without the stage)."""
    groups = list((measured.classes or {}).values()) or [measured]
    sigmas = [
        _lognormal_sigma(s.p50_s or 0.0, s.p90_s)
        for m in groups
        if (s := (m.stages or {}).get(stage)) is not None
    ]
    return statistics.fmean(sigmas) if sigmas else 0.0


def _line_by_prompt_tokens(measured: PolicyReport, stage: str) -> tuple[float, float] | None:
    """(seconds at 0 tokens, seconds per prompt token): the least-squares line through the
    measured run's request classes' (mean prompt tokens, `stage` p50), intercept clamped at
    >= 0; None with fewer than two classes of different prompt lengths that have the stage,
    or when the stage shrinks with the prompt."""
    points = [
        (m.prompt_tokens_mean, s.p50_s)
        for m in (measured.classes or {}).values()
        if m.prompt_tokens_mean is not None
        and (s := (m.stages or {}).get(stage)) is not None
        and s.p50_s is not None
    ]
    if len({x for x, _ in points}) < 2:
        return None
    slope, intercept = np.polyfit([x for x, _ in points], [y for _, y in points], 1)
    if slope < 0:
        return None
    return max(0.0, float(intercept)), float(slope)


def _decode_hops_by_path(measured: PolicyReport) -> tuple[StageStats | None, StageStats | None]:
    """(local, remote): the decode_hops of the measured run's largest request class with no
    prefill stage (all of it prefilled on its decode engine) and of its largest class with one
    (None where there is no such class, or no decode_hops in it)."""
    local: list[Metrics] = []
    remote: list[Metrics] = []
    for m in (measured.classes or {}).values():
        stages = m.stages or {}
        if stages.get("decode_hops") is None or stages["decode_hops"].p50_s is None:
            continue
        prefill = stages.get("prefill")
        (local if prefill is None or prefill.p50_s is None else remote).append(m)

    def hops(group: list[Metrics]) -> StageStats | None:
        if not group:
            return None
        return (max(group, key=lambda m: m.num_requests).stages or {})["decode_hops"]

    return hops(local), hops(remote)


HOPS_PER_STAGE = 2
"""A measured `*_hops` stage is two hops (there and back), each drawn on its own in the
simulation."""


def _lognormal_sigma(p50_s: float, p90_s: float | None, num_terms: int = 1) -> float:
    """The sigma of each of `num_terms` independent, identical log-normals whose sum has the
    measured p90 / p50 (0 when not above 1). A sum spreads less than its terms, so fitting
    the sum's spread to one term would narrow the simulated tail; the terms' sigma comes
    from the Fenton-Wilkinson approximation (the sum as one log-normal with the same mean and
    variance): exp(sigma^2) = 1 + n (exp(sigma_sum^2) - 1)."""
    if p90_s is None or p50_s <= 0 or p90_s <= p50_s:
        return 0.0
    sigma_sum = math.log(p90_s / p50_s) / Z90
    sigma = math.sqrt(math.log1p(num_terms * math.expm1(sigma_sum**2)))
    return min(3.0, sigma)
