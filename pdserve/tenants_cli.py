"""`pdserve tenants` (typer): per-tenant usage of a running cluster, and key digests for the key
file (docs/tenants.md).

- `usage`: scrapes the routers' /metrics at the start and at the end of a window (every router
  replica, merged as `pdserve top` does: pdserve/top/poll.py) and prints each tenant's usage
  over it (pdserve/top/tenants.py), as totals and per-second rates; `--json` writes it.
  Exit status: 0 done; 1 router unreachable; 2 bad options or an unwritable --json path.
- `hash-key`: reads one API key from stdin (without echo at a terminal) and prints its
  lowercase hex SHA-256, the form the key file's `key_sha256:` lists take. Exit status 2 when
  stdin holds no key or more than one line.

Registered in pdserve/cli.py.
"""

from __future__ import annotations

import getpass
import json
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from pdserve.router.tenants.directory import key_digest
from pdserve.top.poll import Poller, PollError
from pdserve.top.render import tenant_tables
from pdserve.top.scrape import Scrape
from pdserve.top.tenants import TenantRow, tenant_rows
from pdserve.top.window import ScrapeWindow

tenants_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Tenants of a pdserve cluster: usage over a window, key digests for the key file.",
)

NO_TENANTS = (
    "no tenant series in the router's /metrics: no tenant has sent a request since the "
    "router started, or the router predates tenants"
)


def measure(
    scrape: Callable[[], Scrape],
    window_s: float,
    wait: Callable[[float], None],
) -> tuple[TenantRow, ...]:
    """Scrape, `wait` out the rest of `window_s`, scrape again: each tenant's usage between."""
    scrapes = ScrapeWindow(window_s)
    started = time.monotonic()
    first = scrape()
    scrapes.add(first)
    wait(max(0.0, window_s - (time.monotonic() - started)))
    last = scrape()
    scrapes.add(last)
    return tenant_rows(last.samples, scrapes.delta())


def usage_document(url: str, window_s: float, rows: tuple[TenantRow, ...]) -> dict[str, Any]:
    """What `--json` writes: the window asked for, the span measured, one entry per tenant."""
    return {
        "url": url,
        "window_s": window_s,
        "span_s": rows[0].span_s if rows else None,
        "tenants": [r.as_dict() for r in rows],
    }


def _wait_with_progress(console: Console, seconds: float) -> None:
    columns = (TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(f"measuring usage over {seconds:.0f} s", total=seconds)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(0.25, left))
            bar.update(task, completed=seconds - max(0.0, end - time.monotonic()))


@tenants_app.command("usage", short_help="Each tenant's usage over a window (totals and rates).")
def usage(
    url: Annotated[str, typer.Option(help="Router URL of the running cluster.")] = (
        "http://127.0.0.1:8000"
    ),
    window: Annotated[
        float, typer.Option(min=1.0, help="Seconds between the two scrapes of /metrics.")
    ] = 60.0,
    json_path: Annotated[
        pathlib.Path | None, typer.Option("--json", help="Also write the usage as JSON here.")
    ] = None,
) -> None:
    """Scrape every router replica's /metrics now and after --window seconds, and print each
    tenant's usage between: requests and 429s (with the top reason), prompt / cached / output
    tokens, engine-measured prefill seconds and each tenant's share of them, decode KV
    block-seconds, TTFT p50/p99, ITL p99, fair-queue wait p99 by tier, in-flight requests now.
    Tenants are the names of the router's key file; a tenant with no request since the router
    started has no series yet and is not listed."""
    console = Console()
    if json_path is not None and not json_path.parent.is_dir():
        console.print(f"[red]--json:[/red] no folder {escape(str(json_path.parent))}")
        raise typer.Exit(2)
    with Poller(url, timeout_s=10.0) as poller:
        try:
            rows = measure(poller.scrape, window, lambda s: _wait_with_progress(console, s))
        except PollError as exc:
            Console(stderr=True).print(f"[red]{escape(str(exc))}[/red]")
            raise typer.Exit(1) from exc
    span = rows[0].span_s if rows else window
    console.print(f"[bold]pdserve tenants usage[/bold] · {escape(url)} · over {span:.1f} s")
    if rows:
        console.print(tenant_tables(rows, with_totals=True))
    else:
        console.print(f"[yellow]{NO_TENANTS}[/yellow]")
    if json_path is not None:
        doc = usage_document(url, window, rows)
        try:
            json_path.write_text(json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            console.print(f"[red]--json:[/red] cannot write {escape(str(json_path))}: {exc}")
            raise typer.Exit(2) from exc
        console.print(f"usage written to {escape(str(json_path))}")


def read_key(stdin: Any) -> str:
    """The one key on `stdin` (prompted without echo at a terminal), stripped as the router
    strips a presented key; ValueError when there is none or more than one line."""
    text = getpass.getpass("API key: ") if stdin.isatty() else stdin.read()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("no key on stdin")
    if len(lines) > 1:
        raise ValueError("one key per call: stdin has more than one line")
    return lines[0]


@tenants_app.command(
    "hash-key", short_help="Print the SHA-256 of a key read from stdin, for `key_sha256:`."
)
def hash_key() -> None:
    """Read one API key from stdin (typed without echo at a terminal, or piped) and print its
    lowercase hex SHA-256: an entry for a tenant's `key_sha256:` list in the key file, so the
    file need not hold the key itself."""
    try:
        key = read_key(sys.stdin)
    except ValueError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    typer.echo(key_digest(key))
