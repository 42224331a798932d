"""Per-phase results, per-setup pooling, ratios and the printed table (pure).

A *phase* is one load against one setup in one round. Its latency and throughput come from
`pdserve bench --json` (policy `default`); its CPU from the sampler's `CpuTotals` over the
bench process's lifetime, divided by every request the bench sent in that time (measured +
warm-up + calibration probes), so the idle seconds at the bench's start are included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pdserve.bench.config import BenchConfig, warmup_lengths
from pdserve.bench.peers.cpu import CpuTotals, ms_per_request
from pdserve.bench.stats import mean, ratio, sig3

SETUP_LABELS = {
    "ray_serve_llm": "Ray Serve LLM P/D (build_pd_openai_app)",
    "plain_vllm": "2 plain vLLM servers + 60-line proxy (floor)",
    "pdserve": "pdserve",
    "pdserve_proxy": "pdserve, HTTP via Serve's proxy (the Helm chart's lean path)",
}
CALIBRATION_PROBES = 2  # pdserve bench sends two calibration requests in text mode


@dataclass(frozen=True)
class PhaseResult:
    """One load against one setup in one round."""

    setup: str
    round_index: int
    num_requests: int
    num_errors: int
    num_sent_in_window: int
    wall_s: float | None
    requests_per_s: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    e2e_p50_s: float | None
    e2e_p99_s: float | None
    window_s: float
    serving_cpu_s: float
    engine_cpu_s: float
    idle_serving_cpu_ms_per_s: float | None
    top_serving: tuple[tuple[str, float], ...]
    error: str | None = None
    machine_busy_cores: float | None = None
    idle_top_serving: tuple[tuple[str, float], ...] = ()

    @property
    def serving_cpu_ms_per_request(self) -> float | None:
        return ms_per_request(self.serving_cpu_s, self.num_sent_in_window)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["serving_cpu_ms_per_request"] = self.serving_cpu_ms_per_request
        out["engine_cpu_ms_per_request"] = ms_per_request(
            self.engine_cpu_s, self.num_sent_in_window
        )
        return out


def phase_from_bench(
    setup: str,
    round_index: int,
    bench: Mapping[str, Any],
    cpu: CpuTotals,
    window_s: float,
    idle_serving_cpu_ms_per_s: float | None,
) -> PhaseResult:
    """Combine one `pdserve bench --json` report with the CPU sampled during it."""
    policy = next(iter(bench["policies"].values()))
    config = bench["config"]
    defaults = BenchConfig.model_fields
    lengths = warmup_lengths(
        *(
            config.get(name, defaults[name].default)
            for name in ("workload", "short_tokens", "long_tokens", "long_fraction")
        )
    )
    warmup = int(config.get("warmup", 0)) * len(lengths)
    probes = CALIBRATION_PROBES if bench.get("calibration") is not None else 0
    sent = int(policy["num_requests"]) + warmup + probes
    return PhaseResult(
        setup=setup,
        round_index=round_index,
        num_requests=int(policy["num_requests"]),
        num_errors=int(policy["num_errors"]),
        num_sent_in_window=sent,
        wall_s=policy.get("wall_s"),
        requests_per_s=policy.get("requests_per_s"),
        ttft_p50_s=policy.get("ttft_p50_s"),
        ttft_p99_s=policy.get("ttft_p99_s"),
        e2e_p50_s=policy.get("e2e_p50_s"),
        e2e_p99_s=policy.get("e2e_p99_s"),
        window_s=window_s,
        serving_cpu_s=cpu.serving_s,
        engine_cpu_s=cpu.engine_s,
        idle_serving_cpu_ms_per_s=idle_serving_cpu_ms_per_s,
        top_serving=tuple((p.name, p.cpu_s) for p in cpu.top("serving")),
    )


def failed_phase(setup: str, round_index: int, error: str) -> PhaseResult:
    """A phase whose setup did not start or whose load could not run."""
    return PhaseResult(
        setup,
        round_index,
        0,
        0,
        0,
        None,
        None,
        None,
        None,
        None,
        None,
        0.0,
        0.0,
        0.0,
        None,
        (),
        error=error,
    )


@dataclass(frozen=True)
class SetupSummary:
    """A setup's phases pooled: throughput = completed requests ÷ summed phase wall time;
    latency percentiles = the mean of the per-phase percentiles; CPU per request = summed CPU
    ÷ summed requests sent."""

    setup: str
    num_phases: int
    num_failed_phases: int
    num_requests: int
    num_errors: int
    requests_per_s: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    e2e_p50_s: float | None
    e2e_p99_s: float | None
    serving_cpu_ms_per_request: float | None
    engine_cpu_ms_per_request: float | None
    idle_serving_cpu_ms_per_s: float | None
    requests_per_s_by_round: tuple[float | None, ...]


def _mean_of(phases: Sequence[PhaseResult], attr: str) -> float | None:
    return mean([v for p in phases if (v := getattr(p, attr)) is not None])


def summarize_setup(setup: str, phases: Sequence[PhaseResult]) -> SetupSummary:
    """Pool one setup's phases (failed phases are counted, not pooled)."""
    ok = [p for p in phases if p.error is None and p.num_requests > 0]
    completed = sum(p.num_requests - p.num_errors for p in ok)
    wall = sum(p.wall_s or 0.0 for p in ok)
    sent = sum(p.num_sent_in_window for p in ok)
    return SetupSummary(
        setup=setup,
        num_phases=len(phases),
        num_failed_phases=len(phases) - len(ok),
        num_requests=sum(p.num_requests for p in ok),
        num_errors=sum(p.num_errors for p in ok),
        requests_per_s=completed / wall if wall > 0 else None,
        ttft_p50_s=_mean_of(ok, "ttft_p50_s"),
        ttft_p99_s=_mean_of(ok, "ttft_p99_s"),
        e2e_p50_s=_mean_of(ok, "e2e_p50_s"),
        e2e_p99_s=_mean_of(ok, "e2e_p99_s"),
        serving_cpu_ms_per_request=ms_per_request(sum(p.serving_cpu_s for p in ok), sent),
        engine_cpu_ms_per_request=ms_per_request(sum(p.engine_cpu_s for p in ok), sent),
        idle_serving_cpu_ms_per_s=_mean_of(ok, "idle_serving_cpu_ms_per_s"),
        requests_per_s_by_round=tuple(p.requests_per_s for p in phases),
    )


RATIO_METRICS = (
    "requests_per_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
    "serving_cpu_ms_per_request",
    "engine_cpu_ms_per_request",
)


def ratios(
    summaries: Mapping[str, SetupSummary], numerator: str = "pdserve"
) -> dict[str, dict[str, float | None]]:
    """`numerator ÷ other` for every metric of `RATIO_METRICS`, for every other setup."""
    top = summaries.get(numerator)
    if top is None:
        return {}
    out: dict[str, dict[str, float | None]] = {}
    for name, other in summaries.items():
        if name == numerator:
            continue
        out[f"{numerator}/{name}"] = {
            m: ratio(getattr(top, m), getattr(other, m)) for m in RATIO_METRICS
        }
    return out


COLUMNS = (
    ("setup", "setup"),
    ("req/s", "requests_per_s"),
    ("TTFT p50 ms", "ttft_p50_s"),
    ("TTFT p99 ms", "ttft_p99_s"),
    ("E2E p50 ms", "e2e_p50_s"),
    ("E2E p99 ms", "e2e_p99_s"),
    ("serving CPU ms/req", "serving_cpu_ms_per_request"),
    ("engine CPU ms/req", "engine_cpu_ms_per_request"),
)


LATENCY_ATTRS = ("ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s")


def _cell(attr: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    if attr in LATENCY_ATTRS and value is not None:
        return sig3(1000.0 * value)
    return sig3(value)


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Aligned text columns: the first left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(
            f"{c:<{w}}" if i == 0 else f"{c:>{w}}"
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [header, *rows]
    ]


def table_lines(
    summaries: Mapping[str, SetupSummary], ratio_rows: Mapping[str, Mapping[str, float | None]]
) -> list[str]:
    """The results table (one row per setup, then one row per ratio), as text lines."""
    header = [title for title, _ in COLUMNS]
    rows = [[_cell(attr, getattr(s, attr)) for _, attr in COLUMNS] for s in summaries.values()]
    for name, values in ratio_rows.items():
        rows.append([name.replace("/", " ÷ ")] + [sig3(values.get(a)) for _, a in COLUMNS[1:]])
    return _grid(header, rows)
