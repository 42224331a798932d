"""`pdserve report` (typer): redraw a saved run's HTML report, and look at a report in headless
Chromium the way the tests do.

- `render FILE --out DIR`: the page of a saved `--json` document of bench, bench-overload,
  bench-faults, simulate (with `--measured` its bench report) or sim-check.
- `look DIR|FILE [--screenshot PNG]`: open the report in Debian's Chromium, wait for its
  charts, print what rendered (charts, markers, console errors, time to render).
  Exit status: 0 rendered cleanly; 1 a chart did not render or the console had errors;
  2 bad input or no browser.

`write_page_report` is what every command's `--report DIR` calls. Registered in pdserve/cli.py.
"""

from __future__ import annotations

import json
import pathlib
from typing import Annotated, Any

import typer
from rich.console import Console

from pdserve.report.page import REPORT_FILE, Page, write_report

report_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="HTML reports of bench runs and prediction checks: redraw one, look at one.",
)


def write_page_report(page: Page, data: Any, out_dir: pathlib.Path, console: Console) -> None:
    """Write the report and say where (every command's `--report DIR`)."""
    html = write_report(page, data, out_dir)
    size_kib = html.stat().st_size / 1024
    console.print(f"HTML report written to {html} ({size_kib:,.0f} KiB, {len(page.charts)} charts)")


@report_app.command("render")
def render(
    document: Annotated[pathlib.Path, typer.Argument(help="A JSON document a command wrote.")],
    out: Annotated[pathlib.Path, typer.Option(help="Folder for index.html and data.json.")],
    measured: Annotated[
        pathlib.Path | None,
        typer.Option(help="simulate documents: the bench report they were checked against."),
    ] = None,
) -> None:
    """Draw the HTML report of a saved JSON document."""
    from pdserve.bench.report import BenchReport
    from pdserve.report.documents import UnknownDocument, page_of

    console = Console()
    try:
        doc = json.loads(document.read_text(encoding="utf-8"))
        bench = None
        if measured is not None:
            bench = BenchReport.model_validate_json(measured.read_text(encoding="utf-8"))
        page = page_of(doc, bench)
    except (OSError, ValueError) as exc:  # JSONDecodeError, ValidationError, UnknownDocument
        kind = "unknown document" if isinstance(exc, UnknownDocument) else "cannot read"
        console.print(f"[red]error:[/red] {kind}: {exc}")
        raise typer.Exit(2) from exc
    write_page_report(page, doc, out, console)


@report_app.command("look")
def look_at(
    report: Annotated[pathlib.Path, typer.Argument(help="A report folder or its index.html.")],
    screenshot: Annotated[
        pathlib.Path | None, typer.Option(help="Save a full-page PNG screenshot here.")
    ] = None,
    height: Annotated[
        int | None, typer.Option(min=200, help="Only the page's top HEIGHT pixels (docs).")
    ] = None,
) -> None:
    """Open a report in headless Chromium and say what rendered."""
    from pdserve.report.browser import BrowserUnavailable, look

    console = Console()
    html = report / REPORT_FILE if report.is_dir() else report
    if not html.is_file():
        console.print(f"[red]error:[/red] no report at {html}")
        raise typer.Exit(2)
    try:
        seen = look(html, screenshot, max_height_px=height)
    except BrowserUnavailable as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    console.print(
        f"{seen.title} ({seen.kind}): {len(seen.charts)} charts rendered "
        f"{seen.rendered_s:.2f} s after navigation start"
    )
    for chart in seen.charts.values():
        marks = f"p50 {chart.p50_markers}, p99 {chart.p99_markers}, events {chart.event_markers}"
        console.print(f"  {chart.key}: {chart.width_px:.0f}×{chart.height_px:.0f} px ({marks})")
    if screenshot is not None:
        console.print(f"screenshot: {screenshot}")
    for problem in seen.problems:
        console.print(f"[red]problem:[/red] {problem}")
    raise typer.Exit(1 if seen.problems else 0)
