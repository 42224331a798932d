"""Rich tables for `pdserve profile`: samples (measured vs old/new prediction) and the
coefficients. Output only; the numbers come from `pdserve.profiling.report`."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from pdserve.profiling.report import ReportRow
from pdserve.router.policy.cost_model import CostModel


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def _pct(err: float) -> str:
    text = f"{err * 100:+.0f}%"
    if abs(err) <= 0.15:
        return f"[green]{text}[/green]"
    return f"[red]{text}[/red]" if abs(err) > 0.5 else f"[yellow]{text}[/yellow]"


def samples_table(title: str, rows: Sequence[ReportRow], note: str = "") -> Table:
    """Rows of measured vs predicted milliseconds and relative errors."""
    table = Table(title=title, caption=note or None)
    table.add_column("tokens" if rows and rows[0].kind == "prefill" else "batch")
    for name in ("n", "measured ms", "old ms", "old err", "new ms", "new err"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(
            r.inputs,
            str(r.count),
            _ms(r.measured_s),
            _ms(r.old_s),
            _pct(r.old_error),
            _ms(r.new_s),
            _pct(r.new_error),
        )
    return table


def coefficients_table(old: CostModel, new: CostModel) -> Table:
    """Each coefficient before (the config's) and after the fit."""
    table = Table(title="cost model coefficients")
    table.add_column("coefficient")
    table.add_column("config", justify="right")
    table.add_column("fitted", justify="right")
    old_values = old.model_dump()
    for name, value in new.model_dump().items():
        table.add_row(name, f"{old_values[name]:.4g}", f"{value:.4g}")
    return table


def error_line(label: str, old: float | None, new: float | None) -> str:
    """'prefill: mean |error| 85% (config) -> 7% (fitted)', or '' when there are no samples."""
    if old is None or new is None:
        return ""
    return f"{label}: mean |error| {old * 100:.0f}% (config) -> {new * 100:.0f}% (fitted)"
