"""Adapter: one benchmark run end to end (client, runner, progress, tables, JSON file).

Called by `pdserve bench` (bench/cli.py) with a validated `BenchConfig`; returns the process
exit code: 0 done, 1 could not run or no request succeeded, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import asyncio
import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from pdserve.bench.client import BenchClient, BenchError
from pdserve.bench.config import BenchConfig
from pdserve.bench.deployments import run_deployments
from pdserve.bench.render import (
    error_lines,
    parts_table,
    ratios_table,
    results_table,
    reuse_line,
    stages_table,
    steps_table,
)
from pdserve.bench.report import BenchReport
from pdserve.bench.report_build import build_report
from pdserve.bench.runner import Runner, RunOutcome

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


async def _run(cfg: BenchConfig, progress: Progress) -> RunOutcome:
    clock = time.perf_counter
    if cfg.deployments:
        return await run_deployments(cfg, progress, progress.console.print, clock)
    client = BenchClient(cfg.url, cfg.concurrency, cfg.request_timeout_s, clock=clock)
    try:
        runner = Runner(cfg, client, progress, progress.console.print, clock)
        return await runner.run()
    finally:
        await client.close()


def show(report: BenchReport, console: Console) -> None:
    """Print the tables of a report."""
    console.print(results_table(report))
    stages = stages_table(report)
    if stages is not None:
        console.print(stages)
    if report.workload == "agent":
        for name, policy in report.policies.items():
            console.print(steps_table(name, policy))
            if (parts := parts_table(name, policy)) is not None:
                console.print(parts)
            console.print(reuse_line(name, policy))
    ratios = ratios_table(report)
    if ratios is not None:
        console.print(ratios)
    for note in report.notes:
        console.print(f"note: {note}")
    errors = error_lines(report)
    if errors:
        console.print("[red]errors (most frequent first):[/red]")
        for line in errors[:5]:
            console.print(f"  {line}")


def run_bench(cfg: BenchConfig, console: Console) -> int:
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("errors: {task.fields[errors]}"),
        TimeElapsedColumn(),
        console=console,
    )
    try:
        with progress:
            outcome = asyncio.run(_run(cfg, progress))
    except BenchError as exc:
        console.print(f"[red]bench failed:[/red] {exc}")
        return EXIT_FAILED
    if outcome.model is None or not outcome.phases:
        console.print("[yellow]interrupted before any measurement[/yellow]")
        return EXIT_INTERRUPTED if outcome.interrupted else EXIT_FAILED
    report = build_report(
        cfg, outcome.model, outcome.calibration, outcome.phases, outcome.interrupted,
        outcome.notes,
    )  # fmt: skip
    show(report, console)
    if outcome.interrupted:
        console.print("[yellow]interrupted: the tables show what completed before Ctrl-C")
    if cfg.json_path is not None:
        cfg.json_path.parent.mkdir(parents=True, exist_ok=True)
        cfg.json_path.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
        console.print(f"JSON report written to {cfg.json_path}")
    if cfg.report_dir is not None:
        from pdserve.report.bench_page import bench_page
        from pdserve.report.cli import write_page_report

        write_page_report(
            bench_page(report), report.model_dump(mode="json"), cfg.report_dir, console
        )
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    ok = sum(p.num_requests - p.num_errors for p in report.policies.values())
    return EXIT_OK if ok else EXIT_FAILED
