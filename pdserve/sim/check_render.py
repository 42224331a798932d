"""What `pdserve sim-check` prints: the ratio table, the rank table and the summary lines (rich
tables and strings; no I/O)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from pdserve.bench.stats import sig3
from pdserve.sim.check import TIE, RankRow, RatioRow, Summary


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _verdict(row: RatioRow, profile: str) -> str:
    if row.same_direction(profile) is None:
        return ""
    if row.same_direction(profile):
        return "same"
    return "[red]opposite[/red]" if row.opposite(profile) else "[yellow]differs[/yellow]"


def ratio_table(rows: Sequence[RatioRow], profiles: Sequence[str]) -> Table:
    table = Table(
        title="layout ÷ baseline, measured side by side in one run and predicted",
        caption=(
            "ratio < 1: the layout is faster than the baseline; direction: the prediction says "
            f"better, worse or within {TIE:.0%} as the measurement does (same), the opposite, "
            f"or differs (one side within {TIE:.0%}, the other not); error: predicted ratio ÷ "
            "measured ratio"
        ),
    )
    for col in ("workload", "layout", "requests", "metric", "measured"):
        table.add_column(col, justify="right" if col == "measured" else "left")
    for p in profiles:
        table.add_column(f"predicted\n({p})", justify="right")
        table.add_column("direction", justify="left")
        table.add_column("error", justify="right")
    for r in rows:
        cells = [r.workload, f"{r.layout} ÷ {r.baseline}", r.scope, r.metric, _ratio(r.measured)]
        for p in profiles:
            error = r.error(p)
            cells += [
                _ratio(r.predicted.get(p)),
                _verdict(r, p),
                "-" if error is None else sig3(error),
            ]
        table.add_row(*cells)
    return table


def rank_table(rows: Sequence[RankRow], profiles: Sequence[str]) -> Table:
    table = Table(
        title="layouts best first (pdserve tune's rule: goodput at the SLOs, then TTFT p99)",
        caption="picks best: the layout tune would recommend is the measured best",
    )
    table.add_column("workload")
    table.add_column("measured")
    for p in profiles:
        table.add_column(f"predicted ({p})")
        table.add_column("picks best")
    for r in rows:
        cells = [r.workload, " > ".join(r.measured)]
        for p in profiles:
            ok = r.picks_best(p)
            cells += [" > ".join(r.predicted.get(p, ())), "yes" if ok else "[red]no[/red]"]
        table.add_row(*cells)
    return table


def summary_lines(summaries: Sequence[Summary]) -> list[str]:
    return [
        f"{s.profile}: direction right in {s.same_direction} of {s.cells} ratio cells "
        f"(opposite in {s.opposite}); "
        f"predicted ratios typically x{sig3(s.median_error)} off the measured ones (median); "
        f"recommended layout is the measured best in {s.best_picked} of {s.workloads} workloads"
        for s in summaries
    ]
