"""Adapter: one `pdserve bench-overload` run (client, levels, progress, tables, JSON file).

Called by the CLI with a validated `OverloadConfig`; returns the exit code: 0 every check
passed, 1 a check failed or the run could not start, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import asyncio
import ssl
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pdserve.bench.client import BenchClient, BenchError
from pdserve.bench.mixed import build_mixed
from pdserve.bench.models import RequestResult, RequestSpec
from pdserve.bench.overload import REJECTED, LevelOutcome, OverloadReport, build_overload_report
from pdserve.bench.overload_config import OverloadConfig
from pdserve.bench.prompts import Calibration, PromptFactory
from pdserve.bench.runner import Runner
from pdserve.bench.stats import sig3

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130
DEFAULT_RETRY_S = 1.0  # a 429 without Retry-After (a check fails on it anyway)


class _Levels:
    def __init__(self, cfg: OverloadConfig, client: BenchClient, progress: Progress) -> None:
        self._cfg = cfg
        self._client = client
        self._progress = progress
        self._clock = time.perf_counter
        self._tls = ssl.create_default_context()

    async def run(self, levels: list[LevelOutcome]) -> str:
        """Run every level into `levels` (kept on Ctrl-C); return the model id."""
        workload = self._cfg.workload()
        runner = Runner(workload, self._client, self._progress, self._progress.console.print,
                        self._clock)  # fmt: skip
        model = workload.model or await runner.default_model()
        calibration = await runner.calibrate(model)
        factory = PromptFactory(calibration, salt=f"{self._cfg.seed}:overload:warmup")
        for i in range(workload.warmup):
            spec = RequestSpec(-1, "warmup", 4, 50, prompt=factory.unique(f"w{i}", 50))
            await self._client.send(spec, model, None, self._clock())
        for concurrency in self._cfg.concurrency_levels:
            await self._level(concurrency, model, calibration, levels)
        return model

    async def _level(
        self, concurrency: int, model: str, calibration: Calibration, out: list[LevelOutcome]
    ) -> None:
        cfg = self._cfg
        factory = PromptFactory(calibration, salt=f"{cfg.seed}:overload:c{concurrency}")
        specs = iter(build_mixed(cfg.workload(), factory))
        attempts: list[RequestResult] = []
        unfinished = rejected = 0
        task = self._progress.add_task(f"{concurrency} clients", total=cfg.num_requests, rejected=0)
        t0 = self._clock()

        async def client_loop() -> None:
            # One connection pool per client, as independent users have (a shared pool of
            # hundreds of connections costs httpx a readability poll of each per request).
            client = BenchClient(cfg.url, 1, cfg.request_timeout_s, tls=self._tls)
            try:
                await requests_of_one_client(client)
            finally:
                await client.close()

        async def requests_of_one_client(client: BenchClient) -> None:
            nonlocal unfinished, rejected
            for spec in specs:  # one shared iterator: each request is sent by one client
                for _ in range(cfg.max_attempts):
                    r = await client.send(spec, model, None, t0)
                    attempts.append(r)
                    if r.status != REJECTED:
                        break
                    rejected += 1
                    self._progress.update(task, rejected=rejected)
                    wait_s = r.retry_after_s if r.retry_after_s is not None else DEFAULT_RETRY_S
                    await asyncio.sleep(min(wait_s, cfg.max_retry_wait_s))
                else:
                    unfinished += 1
                self._progress.update(task, advance=1)

        health: list[float | None] = []
        clients = [asyncio.create_task(client_loop()) for _ in range(concurrency)]
        prober = asyncio.create_task(self._probe_health(health))
        try:
            await asyncio.gather(*clients)
        finally:
            for c in (*clients, prober):
                c.cancel()
            await asyncio.gather(prober, return_exceptions=True)  # closes its client
            wall_s = self._clock() - t0
            out.append(
                LevelOutcome(
                    concurrency, cfg.num_requests, tuple(attempts), wall_s, unfinished,
                    tuple(health),
                )
            )  # fmt: skip

    async def _probe_health(self, out: list[float | None]) -> None:
        """GET /health at `health_probes_per_s` (a fixed schedule, not waiting for answers: a
        slow answer does not thin the probes) until cancelled; each probe's seconds into `out`.
        Kept-alive connections, as the flood's clients have: the two latencies differ only by
        what the router does with the request."""
        cfg = self._cfg
        if cfg.health_probes_per_s <= 0:
            return
        period_s = 1.0 / cfg.health_probes_per_s
        pending: set[asyncio.Task[None]] = set()
        client = BenchClient(cfg.url, 8, cfg.request_timeout_s, tls=self._tls)

        async def one() -> None:
            out.append(await client.probe("/health"))

        next_s = self._clock()
        try:
            while True:
                task = asyncio.create_task(one())
                pending.add(task)
                task.add_done_callback(pending.discard)
                next_s += period_s
                await asyncio.sleep(max(0.0, next_s - self._clock()))
        finally:
            for task in pending:
                task.cancel()
            await client.close()


def levels_table(report: OverloadReport) -> Table:
    table = Table(
        title=f"overload: closed-loop clients against {report.url} ({report.model})",
        caption="a 429 is retried after its Retry-After; TTFT and E2E are of the 200s",
    )
    table.add_column("metric")
    for lv in report.levels:
        table.add_column(f"{lv.concurrency} clients", justify="right")
    rows: list[tuple[str, str]] = [
        ("requests", "num_requests"), ("attempts", "num_attempts"), ("200", "num_ok"),
        ("429", "num_rejected"), ("5xx", "num_5xx"), ("timeouts (hangs)", "num_timeouts"),
        ("other errors", "num_other_errors"), ("gave up", "num_unfinished"),
    ]  # fmt: skip
    for label, field in rows:
        table.add_row(label, *(str(getattr(lv, field)) for lv in report.levels))
    table.add_row(
        "429 share",
        *("-" if lv.rejected_fraction is None else f"{lv.rejected_fraction:.0%}"
          for lv in report.levels),
    )  # fmt: skip
    for label, field in (
        ("429 latency p50 (s)", "reject_latency_p50_s"),
        ("429 latency p95 (s)", "reject_latency_p95_s"),
        ("429 latency p99 (s)", "reject_latency_p99_s"),
        ("429 latency max (s)", "reject_latency_max_s"),
        ("/health p50 (s)", "health_latency_p50_s"),
        ("/health p95 (s)", "health_latency_p95_s"),
        ("429 p95 / /health p95", "reject_to_health_p95_ratio"),
        ("Retry-After p50 (s)", "retry_after_p50_s"),
        ("TTFT p50 (s)", "ttft_p50_s"),
        ("TTFT p99 (s)", "ttft_p99_s"),
        ("E2E p99 (s)", "e2e_p99_s"),
        ("E2E max (s)", "e2e_max_s"),
        ("requests/s", "requests_per_s"),
        ("output tokens/s", "output_tokens_per_s"),
    ):
        table.add_row(label, *(sig3(getattr(lv, field)) for lv in report.levels))
    return table


def show(report: OverloadReport, console: Console) -> None:
    console.print(levels_table(report))
    for key, values in report.ratios.items():
        parts = ", ".join(f"{f} {sig3(v)}" for f, v in values.items())
        console.print(f"ratios {key}: {parts}")
    for lv in report.levels:
        for message, count in lv.errors.items():
            console.print(f"[red]{lv.concurrency} clients: {count} x[/red] {message}")
    for check in report.checks:
        mark = "[green]PASS[/green]" if check.passed else "[red]FAIL[/red]"
        console.print(f"{mark} {check.name}: {check.detail}")


def run_overload(cfg: OverloadConfig, console: Console) -> int:
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("429s: {task.fields[rejected]}"),
        TimeElapsedColumn(),
        console=console,
    )
    levels: list[LevelOutcome] = []
    model: str | None = cfg.model
    interrupted = False

    async def main() -> None:
        nonlocal model
        client = BenchClient(cfg.url, 1, cfg.request_timeout_s)  # model list, calibration
        try:
            model = await _Levels(cfg, client, progress).run(levels)
        finally:
            await client.close()

    try:
        with progress:
            asyncio.run(main())
    except BenchError as exc:
        console.print(f"[red]bench-overload failed:[/red] {exc}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        interrupted = True
    if not levels:
        console.print("[yellow]interrupted before any level was measured[/yellow]")
        return EXIT_INTERRUPTED if interrupted else EXIT_FAILED
    report = build_overload_report(
        cfg.url, model or "?", cfg.model_dump(mode="json"), levels,
        cfg.max_reject_s, cfg.max_ttft_p99_ratio, interrupted, cfg.max_reject_health_ratio,
    )  # fmt: skip
    show(report, console)
    if cfg.json_path is not None:
        cfg.json_path.parent.mkdir(parents=True, exist_ok=True)
        cfg.json_path.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
        console.print(f"JSON report written to {cfg.json_path}")
    if cfg.report_dir is not None:
        from pdserve.report.cli import write_page_report
        from pdserve.report.overload_page import overload_page

        data = report.model_dump(mode="json")
        write_page_report(overload_page(report), data, cfg.report_dir, console)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if report.passed else EXIT_FAILED
