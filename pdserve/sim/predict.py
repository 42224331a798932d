"""Predict a deployment's metrics for a workload, and set predictions beside a measured
`pdserve bench` report (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pdserve.bench.config import BenchConfig
from pdserve.bench.intervals import measured_interval
from pdserve.bench.report import CLIENT_OVERHEAD, BenchReport, Metrics, StageStats
from pdserve.bench.rounds import round_values
from pdserve.bench.stats import ratio
from pdserve.bench.trace import TraceRecord
from pdserve.router.timeline import STAGES
from pdserve.sim.host import run_speed_factors
from pdserve.sim.layout import SimLayout
from pdserve.sim.outcome import SimOutcome
from pdserve.sim.profile import SimProfile
from pdserve.sim.report import sim_metrics
from pdserve.sim.simulator import Simulation
from pdserve.sim.workload import SimRequest, from_bench, from_trace

COMPARED = (
    ("TTFT p50", "ttft_p50_s"),
    ("TTFT p99", "ttft_p99_s"),
    ("ITL p50", "itl_p50_s"),
    ("ITL p99", "itl_p99_s"),
    ("TPOT p50", "tpot_p50_s"),
    ("E2E p50", "e2e_p50_s"),
    ("requests/s", "requests_per_s"),
    ("goodput", "goodput_fraction"),
)
"""(label, Metrics field) of the rows predictions are compared on."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """One deployment's predicted metrics: all requests, and per request class."""

    name: str
    layout: SimLayout
    metrics: Metrics
    classes: dict[str, Metrics]
    runs: int = 1


def workload_requests(
    cfg: BenchConfig, block_size_tokens: int, trace: Sequence[TraceRecord] = ()
) -> list[SimRequest]:
    """The requests `pdserve bench` would send with `cfg` (trace: the given records)."""
    if cfg.workload == "trace":
        return from_trace(trace, block_size_tokens, cfg)
    return from_bench(cfg, block_size_tokens)


def predict(
    name: str,
    layout: SimLayout,
    profile: SimProfile,
    cfg: BenchConfig,
    trace: Sequence[TraceRecord] = (),
    *,
    runs: int | None = None,
) -> Prediction:
    """Simulate `cfg`'s workload (its concurrency cap included) on `layout`, `runs` times
    with different draws of the host's spreads (seeds 0..runs-1), each at its own host speed
    (`run_speed_factors` of the `cpu_host` block's `round_speed_sigma`: a measured run pools
    rounds taken at different speeds), and pool the requests: a p99 of one 200-request run
    is about its second-slowest request, as noisy as a measurement's. `runs` None:
    `default_runs` for the workload's size, or 1 without a `cpu_host` block (every run would
    be the same exact run)."""
    block = layout.engines[0].limits.block_size_tokens
    requests = workload_requests(cfg, block, trace)
    if runs is None:
        # Without a cpu_host block every run is the same exact run: one is enough.
        runs = default_runs(len(requests)) if profile.cpu_host is not None else 1
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    factors = run_speed_factors(profile.host.round_speed_sigma, runs)
    outcomes = [
        Simulation(
            layout,
            profile,
            concurrency=cfg.concurrency,
            seed=seed,
            speed_factor=factors[seed],
        ).run(requests)
        for seed in range(runs)
    ]
    pooled = SimOutcome(
        results=[r for o in outcomes for r in o.results], wall_s=sum(o.wall_s for o in outcomes)
    )
    metrics, classes = sim_metrics(pooled, cfg)
    return Prediction(name, layout, metrics, classes, runs)


POOLED_REQUESTS = 2400
"""Simulated requests a prediction pools by default (see `default_runs`)."""
MAX_DEFAULT_RUNS = 8


def default_runs(num_requests: int) -> int:
    """Runs that pool about POOLED_REQUESTS requests: 8 for a 200- or 300-request workload,
    1 from 2,400 requests on (a long workload's p99 is already many requests deep)."""
    return max(1, min(MAX_DEFAULT_RUNS, math.ceil(POOLED_REQUESTS / max(1, num_requests))))


@dataclass(frozen=True, slots=True)
class ComparedRow:
    """One metric of one deployment (or one of its request classes): predicted, measured
    and predicted / measured. `interval`: the measured value's 95 %
    confidence interval from the run's requests (how precisely the run pins it, see
    pdserve.bench.intervals; None when the report kept no requests or the metric is not a
    percentile). `rounds`: the same percentile in each of the run's rounds, in order (None
    with fewer than two rounds or no kept requests; pdserve.bench.rounds)."""

    deployment: str
    scope: str
    label: str
    field: str
    predicted: float | None
    measured: float | None
    interval: tuple[float, float] | None = None
    rounds: tuple[float, ...] | None = None

    @property
    def ratio(self) -> float | None:
        return ratio(self.predicted, self.measured)

    @property
    def in_interval(self) -> bool | None:
        """Whether the prediction lies inside the measured value's interval (None without
        one): a miss inside it is one the run itself cannot tell from sampling noise."""
        if self.interval is None or self.predicted is None:
            return None
        return self.interval[0] <= self.predicted <= self.interval[1]


@dataclass(frozen=True, slots=True)
class StageRow:
    """One timeline stage of one deployment's request class: predicted and measured p50 and
    p99 (seconds; None where that side has no such stage, e.g. a layout without prefills)."""

    deployment: str
    scope: str
    stage: str
    predicted: StageStats | None
    measured: StageStats | None


def compare_stages(predictions: Sequence[Prediction], measured: BenchReport) -> list[StageRow]:
    """Per deployment the report measured and per request class (all requests when it has
    none): every timeline stage either side has, in path order, `decode` left out (it is the
    stream after the first token, not a latency the fit uses)."""
    rows = []
    for p in predictions:
        m = measured.policies.get(p.name)
        if m is None:
            continue
        scopes = [(c, p.classes.get(c), mm) for c, mm in (m.classes or {}).items()]
        for scope, pm, mm in scopes or [("all", p.metrics, m)]:
            ps, ms = (pm.stages if pm else None) or {}, mm.stages or {}
            names = [
                n for n in (*STAGES, CLIENT_OVERHEAD) if n != "decode" and (n in ps or n in ms)
            ]
            rows += [StageRow(p.name, scope, n, ps.get(n), ms.get(n)) for n in names]
    return rows


def compare(predictions: Sequence[Prediction], measured: BenchReport) -> list[ComparedRow]:
    """Rows for every prediction whose deployment the report measured: all requests, then
    each class the report has."""
    rows = []
    for p in predictions:
        m = measured.policies.get(p.name)
        if m is None:
            continue
        scopes: list[tuple[str, Metrics, Metrics]] = [("all", p.metrics, m)]
        scopes += [
            (cls, p.classes[cls], mm) for cls, mm in (m.classes or {}).items() if cls in p.classes
        ]
        for scope, pm, mm in scopes:
            rows += [
                ComparedRow(
                    p.name,
                    scope,
                    label,
                    f,
                    getattr(pm, f),
                    getattr(mm, f),
                    interval=measured_interval(m, None if scope == "all" else scope, f),
                    rounds=round_values(m, None if scope == "all" else scope, f),
                )
                for label, f in COMPARED
            ]
    return rows
