"""Rich rendering of a kv-check report: the table and the verdict lines."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from pdserve.kv_transfer.fabric_check.report import Report
from pdserve.kv_transfer.fabric_check.transports import SOURCE_PROTO_INFO
from pdserve.kv_transfer.fabric_check.units import format_size


def _three_digits(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def format_seconds(seconds: float) -> str:
    """Latency with a readable unit and about three digits: "7.42µs", "195µs", "24.0ms"."""
    if seconds < 1e-3:
        return f"{_three_digits(seconds * 1e6)}µs"
    if seconds < 1.0:
        return f"{_three_digits(seconds * 1e3)}ms"
    return f"{_three_digits(seconds)}s"


def report_table(report: Report) -> Table:
    """One row per (operation, size). The transport column only appears when transports
    differ between rows; otherwise they are printed once below the table."""
    where = f" with {report.peer}" if report.peer else ""
    table = Table(title=f"NIXL {report.mode}{where}, {report.device} memory")
    per_row = len({row.transports for row in report.rows}) > 1
    names = ["op", "size", "n", "p50", "p99", "NIXL GB/s", "memcpy GB/s", "ratio"]
    for name in [*names, "transport"] if per_row else names:
        table.add_column(name, justify="left" if name in ("op", "transport") else "right")
    for row in report.rows:
        cells = [
            row.op,
            format_size(row.num_bytes),
            str(row.iterations),
            format_seconds(row.latency_p50_s),
            format_seconds(row.latency_p99_s),
            f"{row.bandwidth_gbps:.2f}",
            f"{row.memcpy_bandwidth_gbps:.2f}",
            f"{row.ratio_to_memcpy:.2f}",
        ]
        table.add_row(*cells, *([", ".join(row.transports) or "?"] if per_row else []))
    return table


def print_report(report: Report, console: Console) -> None:
    """The table, then the transports, the fabric verdict and any warnings."""
    console.print(report_table(report))
    how = (
        "selected by UCX for these operations (UCX_PROTO_INFO)"
        if report.transport_detection == SOURCE_PROTO_INFO
        else f"detection: {report.transport_detection}"
    )
    shown = ", ".join(report.transports) or "none detected"
    console.print(f"transports: {shown}  [dim]({how})[/dim]")
    if report.endpoint_transports:
        console.print(f"[dim]endpoint lanes: {', '.join(report.endpoint_transports)}[/dim]")
    verdict = report.verdict
    fabrics = ", ".join(verdict.fabrics) or "unknown"
    state = "[green]met[/green]" if verdict.met else "[red]NOT met[/red]"
    console.print(f"fabric: {fabrics}; expected {verdict.expected}: {state}")
    for line in verdict.warnings:
        style = "bold red" if line.startswith("WARNING") else "dim"
        console.print(line, style=style, markup=False, highlight=False)
    ucx = f"UCX {report.ucx_version}, " if report.ucx_version else ""
    console.print(f"[dim]{ucx}{report.duration_s:.1f} s; GB/s = 1e9 bytes/s[/dim]")
