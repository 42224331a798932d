"""`pdserve top` (typer): poll a router and show the cluster live (or once, with --once).

Registered in pdserve/cli.py. Exit status: 0 done (Ctrl-C in live mode); 1 router unreachable
with --once; 2 bad options or unreadable --fabric-json.
"""

from __future__ import annotations

import pathlib
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live

from pdserve.top.bandwidth import FabricPoint, FabricReportError, load_fabric_report
from pdserve.top.model import build_view
from pdserve.top.poll import Poller, PollError
from pdserve.top.render import render
from pdserve.top.window import ScrapeWindow


def top(
    url: Annotated[str, typer.Option(help="Router URL of the running cluster.")] = (
        "http://127.0.0.1:8000"
    ),
    interval: Annotated[
        float, typer.Option(min=0.1, help="Seconds between scrapes of /metrics.")
    ] = 2.0,
    window: Annotated[
        float, typer.Option(min=0.1, help="Seconds of scrapes that rates and quantiles span.")
    ] = 30.0,
    fabric_json: Annotated[
        pathlib.Path | None,
        typer.Option(
            "--fabric-json",
            help="A `pdserve kv-check --json` report: warn when KV bandwidth falls far below it.",
        ),
    ] = None,
    bandwidth_warn_fraction: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help="Warn below this fraction of the fabric's measured bandwidth."
        ),
    ] = 0.25,
    once: Annotated[
        bool, typer.Option("--once", help="Print one snapshot (two scrapes) and exit.")
    ] = False,
) -> None:
    """Live view of a pdserve cluster: pools and replicas, TTFT/ITL quantiles, KV transfer
    latency and bandwidth, routing decisions and, when the router has tenants, each tenant's
    usage, over the last --window seconds of scrapes."""
    console = Console()
    fabric: tuple[FabricPoint, ...] | None = None
    if fabric_json is not None:
        try:
            fabric = load_fabric_report(fabric_json)
        except FabricReportError as exc:
            console.print(f"[red]--fabric-json:[/red] {exc}")
            raise typer.Exit(2) from exc
    scrapes = ScrapeWindow(window)
    with Poller(url, timeout_s=min(10.0, max(2.0, interval))) as poller:
        if once:
            _once(poller, scrapes, fabric, bandwidth_warn_fraction, interval, console)
        else:
            _live(poller, scrapes, fabric, bandwidth_warn_fraction, interval, console)


def _once(
    poller: Poller,
    scrapes: ScrapeWindow,
    fabric: tuple[FabricPoint, ...] | None,
    warn_fraction: float,
    interval: float,
    console: Console,
) -> None:
    try:
        scrapes.add(poller.scrape())
        time.sleep(interval)
        scrapes.add(poller.scrape())
    except PollError as exc:
        Console(stderr=True).print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc
    view = build_view(scrapes, fabric, warn_fraction)
    console.print(render(view, poller.url, scrapes.window_s, interval, time.strftime("%H:%M:%S")))


def _live(
    poller: Poller,
    scrapes: ScrapeWindow,
    fabric: tuple[FabricPoint, ...] | None,
    warn_fraction: float,
    interval: float,
    console: Console,
) -> None:
    last_ok: float | None = None
    error: str | None = None
    with Live(console=console, screen=True, auto_refresh=False) as live:
        try:
            while True:
                started = time.monotonic()
                try:
                    scrapes.add(poller.scrape())
                    last_ok, error = started, None
                except PollError as exc:
                    age = "" if last_ok is None else f"; data is {started - last_ok:.0f} s old"
                    error = f"{exc} (retrying every {interval:g} s{age})"
                view = build_view(scrapes, fabric, warn_fraction)
                clock = time.strftime("%H:%M:%S")
                screen = render(view, poller.url, scrapes.window_s, interval, clock, error)
                live.update(screen, refresh=True)
                time.sleep(max(0.0, interval - (time.monotonic() - started)))
        except KeyboardInterrupt:
            return
