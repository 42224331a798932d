"""Rich tables and lines for a `BenchReport` (pure: builds renderables, prints nothing)."""

from __future__ import annotations

from rich.table import Table

from pdserve.bench.report import BenchReport, Metrics, PolicyReport
from pdserve.bench.stats import sig3

LATENCIES = (("TTFT", "ttft"), ("ITL", "itl"), ("TPOT", "tpot"), ("E2E", "e2e"))
PERCENTILES = ("p50", "p90", "p99")


def _columns(report: BenchReport) -> list[tuple[str, Metrics]]:
    """(header, metrics) per policy, and per class after it for `mixed`."""
    cols: list[tuple[str, Metrics]] = []
    for name, policy in report.policies.items():
        cols.append((name if policy.classes is None else f"{name}\nall", policy))
        cols += [(f"{name}\n{cls}", m) for cls, m in (policy.classes or {}).items()]
    return cols


def results_table(report: BenchReport) -> Table:
    """Metrics as rows, one column per policy (and per class for `mixed`)."""
    slo = report.config
    table = Table(
        title=f"{report.workload} workload against {report.url} ({report.model})",
        caption=f"goodput: requests with TTFT <= {slo['slo_ttft_s']} s and TPOT <= "
        f"{slo['slo_tpot_s']} s; ITL is per stream chunk",
    )
    cols = _columns(report)
    table.add_column("metric")
    for header, _ in cols:
        table.add_column(header, justify="right")
    metrics = [m for _, m in cols]
    table.add_row("requests", *(str(m.num_requests) for m in metrics))
    table.add_row("errors", *(str(m.num_errors) for m in metrics))
    for label, prefix in LATENCIES:
        for p in PERCENTILES:
            field = f"{prefix}_{p}_s"
            table.add_row(f"{label} {p} (s)", *(sig3(getattr(m, field)) for m in metrics))
    table.add_row("requests/s", *(sig3(m.requests_per_s) for m in metrics))
    table.add_row("output tokens/s", *(sig3(m.output_tokens_per_s) for m in metrics))
    table.add_row(
        "goodput",
        *("-" if m.goodput_fraction is None else f"{m.goodput_fraction:.0%}" for m in metrics),
    )
    table.add_row("goodput req/s", *(sig3(m.goodput_per_s) for m in metrics))
    table.add_row("mean prompt tok", *(sig3(m.prompt_tokens_mean) for m in metrics))
    return table


def stages_table(report: BenchReport) -> Table | None:
    """Where the time went: pdserve's timeline stages, p50 / p99 in ms, one column per
    policy (and class); None when the server reported no timeline."""
    cols = [(h, m) for h, m in _columns(report) if m.stages]
    if not cols:
        return None
    table = Table(
        title="pdserve timeline stages, p50 / p99 (ms)",
        caption="from each stream's pdserve_timing; kv_transfer = decode's wait for the KV "
        "(or, local prefill, its queue); *_hops = Ray Serve round trips",
    )
    table.add_column("stage")
    for header, _ in cols:
        table.add_column(header, justify="right")
    names = list(dict.fromkeys(n for _, m in cols for n in (m.stages or {})))
    for name in names:
        cells = []
        for _, m in cols:
            st = (m.stages or {}).get(name)
            cells.append(
                "-" if st is None or st.p50_s is None or st.p99_s is None
                else f"{st.p50_s * 1000:.0f} / {st.p99_s * 1000:.0f}"
            )  # fmt: skip
        table.add_row(name, *cells)
    return table


def steps_table(name: str, policy: PolicyReport) -> Table:
    """Agent workload: per step, means over agents; with pdserve's prompt cost, the cache
    breaks seen at each step (how many requests, where, tokens recomputed per break)."""
    table = Table(title=f"agent steps ({name}); means over agents")
    rows = policy.steps or []
    breaks = any(row.num_cache_breaks is not None for row in rows)
    cols = ["Step", "Prompt tok", "Cached tok", "Prefill (s)", "Decode (s)", "requests"]
    if breaks:
        cols += ["Cache breaks", "Broke at", "Lost tok"]
    for col in cols:
        table.add_column(col, justify="left" if col == "Broke at" else "right")
    for row in rows:
        cells = [
            str(row.step + 1),
            sig3(row.prompt_tokens_mean),
            sig3(row.cached_tokens_mean),
            sig3(row.prefill_s_mean),
            sig3(row.decode_s_mean),
            str(row.num_requests),
        ]
        if breaks:
            cells += [
                "-" if row.num_cache_breaks is None else str(row.num_cache_breaks),
                ", ".join(row.cache_break_at or []) or "-",
                sig3(row.lost_tokens_mean),
            ]
        table.add_row(*cells)
    return table


def parts_table(name: str, policy: PolicyReport) -> Table | None:
    """Agent workload: prompt tokens by part per step (cached + computed, means over
    agents); None when the server reports no prompt cost."""
    rows = [row for row in policy.steps or [] if row.parts]
    if not rows:
        return None
    order = ("system", "user", "assistant", "tool", "template", "prompt")
    parts = [p for p in order if any(p in (row.parts or {}) for row in rows)]
    table = Table(
        title=f"prompt tokens by part ({name}); cached + computed, means over agents",
        caption="computed tokens are what prefill paid for; cached came from the prefix cache",
    )
    table.add_column("Step", justify="right")
    for part in parts:
        table.add_column(part, justify="right")
    for row in rows:
        cells = [str(row.step + 1)]
        for part in parts:
            m = (row.parts or {}).get(part)
            cells.append("-" if m is None else f"{m.cached_mean:.0f} + {m.computed_mean:.0f}")
        table.add_row(*cells)
    return table


def reuse_line(name: str, policy: PolicyReport) -> str:
    """Agent workload: prefilled tokens with the reuse achieved, without any, and ideal."""
    prefilled = "unknown (server reports no cached tokens)"
    if policy.prefilled_tokens_total is not None:
        prefilled = f"{policy.prefilled_tokens_total:,}"
    return (
        f"{name}: prefilled with reuse {prefilled} vs without reuse "
        f"{policy.prompt_tokens_total:,} (sum of prompt tokens); perfect reuse would prefill "
        f"{policy.final_context_tokens_total or 0:,} (final contexts); cached "
        f"{'-' if policy.cached_tokens_total is None else f'{policy.cached_tokens_total:,}'}"
    )


ITL_RATIO_ROWS = (("ITL p50", "itl_p50_s"), ("ITL p90", "itl_p90_s"), ("ITL p99", "itl_p99_s"))
"""Inter-token latency right under TTFT wherever the ratios compare TTFT (all requests and
each class): a TTFT won by prefilling on the decode engines is paid for in the streams' ITL."""
RATIO_ROWS = (
    ("TTFT p50", "ttft_p50_s"),
    ("TTFT p99", "ttft_p99_s"),
    *ITL_RATIO_ROWS,
    ("E2E p99", "e2e_p99_s"),
    ("requests/s", "requests_per_s"),
    ("output tokens/s", "output_tokens_per_s"),
    ("goodput fraction", "goodput_fraction"),
)
CLASS_RATIO_ROWS = (("TTFT p50", "ttft_p50_s"), ("TTFT p99", "ttft_p99_s"), *ITL_RATIO_ROWS)
"""The rows repeated per request class (mixed workload)."""


def _with_rounds(value: float | None, rounds: list[float] | None) -> str:
    """The pooled ratio, and the range of the per-round ratios when there are several."""
    if not rounds:
        return sig3(value)
    return f"{sig3(value)} ({sig3(min(rounds))}–{sig3(max(rounds))})"


def ratios_table(report: BenchReport) -> Table | None:
    """later ÷ first policy (or deployment), with the per-round range in brackets for the
    latency percentiles when the run had several rounds; None when not comparing."""
    if not report.ratios:
        return None
    table = Table(title="ratios (latencies: lower is better; per-round range in brackets)")
    table.add_column("metric")
    for key in report.ratios:
        new, base = key.split("/", 1)
        table.add_column(f"{new} ÷ {base}", justify="right")
    columns = list(report.ratios.values())
    for label, field in RATIO_ROWS:
        table.add_row(
            label,
            *(_with_rounds(v.get(field), (v.get("rounds") or {}).get(field)) for v in columns),
        )
    classes = columns[0].get("classes") or {}
    for cls in classes:
        for label, field in CLASS_RATIO_ROWS:
            table.add_row(
                f"{label} ({cls})",
                *(
                    _with_rounds(
                        (v.get("classes") or {}).get(cls, {}).get(field),
                        (v.get("rounds") or {}).get(f"{cls}:{field}"),
                    )
                    for v in columns
                ),
            )
    if report.workload == "agent":
        table.add_row("prefilled tokens", *(sig3(v.get("prefilled_tokens_total")) for v in columns))
    return table


def error_lines(report: BenchReport) -> list[str]:
    lines = []
    for name, policy in report.policies.items():
        for e in policy.errors:
            status = f" (HTTP {e.status})" if e.status else ""
            lines.append(f"{name}: {e.count} x{status} {e.message[:300]}")
    return lines
