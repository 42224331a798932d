"""What `pdserve simulate` prints and writes: the prediction, the stage-by-stage and the
metric-by-metric comparison with a measured run, and its JSON document (rich tables; no I/O)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import StageStats
from pdserve.bench.rounds import spread
from pdserve.bench.stats import sig3
from pdserve.sim.predict import ComparedRow, Prediction, StageRow
from pdserve.sim.profile import SimProfile


def predictions_table(predictions: list[Prediction], cfg: BenchConfig) -> Table:
    table = Table(
        title=f"predicted: {cfg.workload} workload, {cfg.num_requests} requests, "
        f"rate {cfg.request_rate or 'closed loop'}, concurrency {cfg.concurrency}"
        f" ({predictions[0].runs if predictions else 1} simulated runs pooled)",
        caption=f"goodput: TTFT <= {cfg.slo_ttft_s} s and TPOT <= {cfg.slo_tpot_s} s",
    )
    table.add_column("metric")
    for p in predictions:
        table.add_column(f"{p.name}\n{p.layout.describe()}", justify="right")
    for label, field in (
        ("TTFT p50 (s)", "ttft_p50_s"), ("TTFT p99 (s)", "ttft_p99_s"),
        ("ITL p50 (s)", "itl_p50_s"), ("ITL p99 (s)", "itl_p99_s"),
        ("TPOT p50 (s)", "tpot_p50_s"), ("E2E p50 (s)", "e2e_p50_s"),
        ("E2E p99 (s)", "e2e_p99_s"), ("requests/s", "requests_per_s"),
        ("goodput", "goodput_fraction"),
    ):  # fmt: skip
        table.add_row(label, *(sig3(getattr(p.metrics, field)) for p in predictions))
    return table


def _ms(stats: StageStats | None) -> str:
    if stats is None or stats.p50_s is None:
        return "-"
    p99 = "-" if stats.p99_s is None else f"{stats.p99_s * 1e3:.0f}"
    return f"{stats.p50_s * 1e3:.0f} / {p99}"


def stages_table(rows: list[StageRow]) -> Table:
    table = Table(
        title="pdserve's timeline, predicted vs measured (p50 / p99 ms)",
        caption="stages as the router records them (router/timeline.py); client_overhead: "
        "the client's TTFT minus the router's",
    )
    for col in ("deployment", "requests", "stage", "predicted", "measured"):
        table.add_column(col, justify="right" if col in ("predicted", "measured") else "left")
    for r in rows:
        table.add_row(r.deployment, r.scope, r.stage, _ms(r.predicted), _ms(r.measured))
    return table


def compared_table(rows: list[ComparedRow]) -> Table:
    intervals = any(r.interval is not None for r in rows)
    rounds = any(r.rounds is not None for r in rows)
    caption = "ratio = predicted / measured"
    if intervals:
        caption += (
            "; measured 95 %: the measured value's confidence interval from the run's requests "
            "(sampling noise only, not the machine's drift between runs)"
        )
    if rounds:
        caption += "; per round: the measured value in each of the run's rounds"
    table = Table(title="predicted vs measured", caption=caption)
    columns = ["deployment", "requests", "metric", "predicted", "measured"]
    columns += ["measured 95 %"] if intervals else []
    columns += ["per round"] if rounds else []
    for col in (*columns, "ratio"):
        numeric = col in ("predicted", "measured", "measured 95 %", "per round", "ratio")
        table.add_column(col, justify="right" if numeric else "left")
    for r in rows:
        cells = [r.deployment, r.scope, r.label, sig3(r.predicted), sig3(r.measured)]
        if intervals:
            cells.append("" if r.interval is None else "-".join(sig3(v) for v in r.interval))
        if rounds:
            cells.append("" if r.rounds is None else " / ".join(sig3(v) for v in r.rounds))
        table.add_row(*cells, sig3(r.ratio))
    return table


def rounds_summary(rows: list[ComparedRow]) -> list[str]:
    """How far the run's rounds moved: each deployment's TPOT p50 per round (the host's
    decode speed as the client saw it). Empty when the report has fewer than two rounds."""
    speeds = [r for r in rows if r.field == "tpot_p50_s" and r.scope == "all" and r.rounds]
    if not speeds:
        return []
    parts = [
        f"{r.deployment} {' / '.join(f'{v * 1e3:.2f}' for v in r.rounds or ())} ms"
        f" (x{sig3(spread(r.rounds or ()))})"
        for r in speeds
    ]
    return ["TPOT p50 by round: " + ", ".join(parts)]


def simulate_json(
    prof: SimProfile,
    cfg: BenchConfig,
    predictions: list[Prediction],
    rows: list[ComparedRow],
    stage_rows: list[StageRow],
) -> dict[str, Any]:
    return {
        "schema_version": 2,
        "profile": prof.model_dump(mode="json"),
        "workload": cfg.model_dump(mode="json"),
        "predictions": {
            p.name: {
                "layout": p.layout.describe(),
                "metrics": p.metrics.model_dump(mode="json"),
                "classes": {c: m.model_dump(mode="json") for c, m in p.classes.items()},
            }
            for p in predictions
        },
        "compared": [
            {
                "deployment": r.deployment,
                "requests": r.scope,
                "field": r.field,
                "predicted": r.predicted,
                "measured": r.measured,
                "ratio": r.ratio,
                "measured_interval": None if r.interval is None else list(r.interval),
                "within_measured_interval": r.in_interval,
                "measured_rounds": None if r.rounds is None else list(r.rounds),
            }
            for r in rows
        ],
        "stages": [
            {
                "deployment": r.deployment,
                "requests": r.scope,
                "stage": r.stage,
                "predicted": None if r.predicted is None else r.predicted.model_dump(mode="json"),
                "measured": None if r.measured is None else r.measured.model_dump(mode="json"),
            }
            for r in stage_rows
        ],
    }
