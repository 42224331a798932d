"""`pdserve kv-check`: parse options, run the check (or serve as the target), print, exit.

Registered in pdserve/cli.py. Exit status: 0 done (warnings included, unless --strict),
1 the check failed (peer unreachable, NIXL error, wrong bytes), 2 bad options,
3 --strict and the expected fabric was not confirmed (e.g. a silent fallback to TCP).
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pdserve.kv_transfer.fabric_check.buffers import DEVICES
from pdserve.kv_transfer.fabric_check.fabric import EXPECTATIONS
from pdserve.kv_transfer.fabric_check.units import (
    DEFAULT_SIZES_BYTES,
    SizeError,
    cap_sizes,
    parse_size,
    parse_sizes,
)

if TYPE_CHECKING:
    from pdserve.kv_transfer.fabric_check.runner import CheckOptions

DEFAULT_PORT = 18515
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_EXPECTATION = 3


def _choice(value: str, allowed: tuple[str, ...], flag: str) -> str:
    if value not in allowed:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(allowed)}", param_hint=flag)
    return value


def _serve(listen: str, once: bool, console: Console) -> None:
    os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")  # before NIXL loads: it logs INFO to stdout
    from pdserve.kv_transfer.fabric_check import peer as peer_side
    from pdserve.kv_transfer.fabric_check.wire import parse_address

    try:
        host, port = parse_address(listen, "0.0.0.0")
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--listen") from exc
    with peer_side.listen(host, port) as listener:
        bound = listener.getsockname()
        console.print(f"kv-check target listening on {bound[0]}:{bound[1]} (Ctrl-C stops)")
        console.print(f"  on the other node: pdserve kv-check --peer THIS_HOST:{bound[1]}")
        try:
            ok = peer_side.serve(listener, once, console.print)
        except KeyboardInterrupt:
            console.print("stopped")
            return
    if not ok:
        raise typer.Exit(EXIT_FAILED)


def kv_check(
    sizes: Annotated[
        str | None,
        typer.Option(help="Comma-separated transfer sizes, e.g. 4K,1M,64M (default 4K..256M, x4)."),
    ] = None,
    max_size: Annotated[
        str | None, typer.Option("--max-size", help="Skip sizes above this, e.g. 16M.")
    ] = None,
    iterations: Annotated[
        int | None,
        typer.Option(min=1, help="Timed transfers per size (default: 100 small .. 10 at 256M)."),
    ] = None,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed transfers per size first.")] = 1,
    write: Annotated[
        bool, typer.Option("--write", help="Also measure WRITE (READ, decode pulling, always).")
    ] = False,
    device: Annotated[str, typer.Option(help="cpu (DRAM) or cuda (VRAM; needs a GPU).")] = "cpu",
    in_process: Annotated[
        bool, typer.Option("--in-process", help="Both agents in this process (diagnostic).")
    ] = False,
    serve: Annotated[
        bool, typer.Option("--serve", help="Be the target for a --peer on another node.")
    ] = False,
    listen: Annotated[
        str, typer.Option(help="With --serve: HOST:PORT to listen on.")
    ] = f"0.0.0.0:{DEFAULT_PORT}",
    once: Annotated[bool, typer.Option("--once", help="With --serve: exit after one run.")] = False,
    peer: Annotated[
        str | None, typer.Option(help="HOST:PORT of a `kv-check --serve` on another node.")
    ] = None,
    expect: Annotated[str, typer.Option(help="Expected fabric: rdma|nvlink|shm|tcp|any.")] = "any",
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 3 when the expected fabric is not confirmed.")
    ] = False,
    json_path: Annotated[
        pathlib.Path | None, typer.Option("--json", help="Also write the report as JSON here.")
    ] = None,
    ucx_log: Annotated[
        pathlib.Path | None, typer.Option(help="Keep the initiator's raw UCX log at this path.")
    ] = None,
) -> None:
    """Measure NIXL transfers between two agents (decode pulls from prefill) against memcpy,
    and report the UCX transports in use: catches a silent fallback to TCP."""
    console = Console()
    _choice(device, DEVICES, "--device")
    _choice(expect, EXPECTATIONS, "--expect")
    if sum([serve, peer is not None, in_process]) > 1:
        raise typer.BadParameter("use only one of --serve, --peer and --in-process")
    if serve:
        _serve(listen, once, console)
        return
    from pdserve.kv_transfer.fabric_check.wire import parse_address

    try:
        chosen = parse_sizes(sizes) if sizes is not None else DEFAULT_SIZES_BYTES
        chosen = cap_sizes(chosen, parse_size(max_size) if max_size is not None else None)
        address = parse_address(peer, "127.0.0.1") if peer is not None else None
    except (SizeError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(EXIT_USAGE) from exc
    from pdserve.kv_transfer.fabric_check.runner import CheckOptions

    options = CheckOptions(
        sizes=chosen,
        iterations=iterations,
        warmup=warmup,
        ops=("READ", "WRITE") if write else ("READ",),
        device=device,
        mode="two-node" if peer else "in-process" if in_process else "same-node",
        expected=expect,
        peer=address,
        ucx_log=ucx_log,
    )
    raise typer.Exit(_run(options, strict, json_path, console))


def _run(
    options: CheckOptions, strict: bool, json_path: pathlib.Path | None, console: Console
) -> int:
    """Run the check with a progress bar, print and save the report; the exit status."""
    from pdserve.kv_transfer.fabric_check.agents import TransferError
    from pdserve.kv_transfer.fabric_check.buffers import DeviceError
    from pdserve.kv_transfer.fabric_check.links import PeerError
    from pdserve.kv_transfer.fabric_check.render import print_report
    from pdserve.kv_transfer.fabric_check.report import to_json
    from pdserve.kv_transfer.fabric_check.runner import run_check

    columns = (TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn())
    try:
        with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as bar:
            task = bar.add_task("starting agents", total=options.total_steps())

            def advance(steps: int, what: str) -> None:
                bar.update(task, advance=steps, description=what)

            report = run_check(options, advance)
    except (PeerError, TransferError, DeviceError, OSError) as exc:
        console.print(f"[red]kv-check failed:[/red] {exc}", highlight=False)
        return EXIT_FAILED
    print_report(report, console)
    if json_path is not None:
        json_path.write_text(json.dumps(to_json(report), indent=2) + "\n")
        console.print(f"[dim]report written to {json_path}[/dim]")
    if strict and not report.verdict.met:
        return EXIT_EXPECTATION
    return 0
