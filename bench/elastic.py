"""Elastic tiers, measured: a prefill-heavy phase, idle, a decode-heavy phase, idle, against a
running cluster whose pools autoscale (deploy/local-autoscale.yaml), while the router's view of
each pool (ready replicas, Ray Serve's target) is sampled every `--sample-s`.

    python -m pdserve.bench.elastic --url http://127.0.0.1:8000 --json out.json [--report DIR]

A load phase runs closed-loop streaming clients until its pool has `--scaled-replicas` ready
replicas and then `--hold-s` more (at most `--max-phase-s`); an idle phase waits until every
elastic pool's target is back at its minimum (at most `--max-phase-s`). Prints each phase's
TTFT / ITL percentiles and failures and the replica changes over time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import pathlib
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import httpx
from rich.console import Console, Group
from rich.table import Table

from pdserve.bench.client import BenchClient
from pdserve.bench.elastic_report import PhaseSummary, Sample, changes, summarize_phase
from pdserve.bench.models import RequestResult, RequestSpec
from pdserve.bench.prompts import Calibration, PromptFactory
from pdserve.router.auth import client_headers

_PHASES = (
    # name, pool that should scale, clients, prompt tokens, output tokens
    ("prefill-heavy", "prefill", 8, 3000, 4),
    ("idle", None, 0, 0, 0),
    ("decode-heavy", "decode", 64, 80, 400),
    ("idle", None, 0, 0, 0),
)


class _Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.samples: list[Sample] = []
        self.requests: list[dict[str, Any]] = []
        """Every request of the load phases: phase, start and answer times (seconds since the
        run started), ok."""
        self._http = httpx.AsyncClient(
            base_url=args.url, headers=client_headers(os.environ), timeout=10
        )
        self._index = itertools.count()
        self._prompts = PromptFactory(
            Calibration(1.0, 0.0), salt=f"elastic-{time.time()}", token_ids=True
        )

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def sample(self) -> Sample:
        doc = (await self._http.get("/v1/pdserve/replicas")).json()
        ready = {p: len([r for r in rs if r.get("healthy")]) for p, rs in doc["pools"].items()}
        target = {p: int(s["target_replicas"]) for p, s in doc.get("scaling", {}).items()}
        s = Sample(round(self.now(), 1), ready, target)
        self.samples.append(s)
        return s

    async def sampler(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.sample()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.args.sample_s)

    async def load(
        self, clients: int, prompt: int, output: int, done: Callable[[], bool]
    ) -> list[RequestResult]:
        bench = BenchClient(self.args.url, clients, request_timeout_s=600)
        results: list[RequestResult] = []

        async def client() -> None:
            while not done():
                i = next(self._index)
                spec = RequestSpec(
                    i, "elastic", output, prompt, prompt=self._prompts.unique(str(i), prompt)
                )
                results.append(await bench.send(spec, self.args.model, None, self.t0))

        try:
            await asyncio.gather(*(client() for _ in range(clients)))
        finally:
            await bench.close()
        return results

    async def phase(
        self, name: str, pool: str | None, clients: int, prompt: int, output: int
    ) -> PhaseSummary:
        start = self.now()
        deadline = start + self.args.max_phase_s
        if pool is None:
            while self.now() < deadline:
                s = await self.sample()
                if s.target and all(n <= 1 for n in s.target.values()):
                    break
                await asyncio.sleep(self.args.sample_s)
            return summarize_phase(name, start, self.now() - start, [])
        scaled_at: list[float] = []

        def done() -> bool:
            last = self.samples[-1] if self.samples else None
            if (
                not scaled_at
                and last is not None
                and last.ready.get(pool, 0) >= self.args.scaled_replicas
            ):
                scaled_at.append(self.now())
            return self.now() > deadline or bool(
                scaled_at and self.now() > scaled_at[0] + self.args.hold_s
            )

        results = await self.load(clients, prompt, output, done)
        self.requests += [
            {"phase": name, "start_s": r.start_s, "ttft_s": r.ttft_s, "e2e_s": r.e2e_s, "ok": r.ok}
            for r in results
        ]
        return summarize_phase(name, start, self.now() - start, results)

    async def close(self) -> None:
        await self._http.aclose()


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    run = _Run(args)
    stop = asyncio.Event()
    sampler = asyncio.create_task(run.sampler(stop))
    try:
        phases = [await run.phase(*p) for p in _PHASES]
    finally:
        stop.set()
        await sampler
        await run.close()
    return {
        "phases": [asdict(p) for p in phases],
        "changes": [asdict(c) for c in changes(run.samples)],
        "samples": [asdict(s) for s in run.samples],
        "requests": run.requests,
    }


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def render(report: dict[str, Any]) -> Group:
    """The phases table and the replica changes, for the terminal."""
    phases = Table(title="Phases", title_justify="left")
    for col in ("phase", "start s", "duration s", "requests", "failed", "TTFT p50 s",
                "TTFT p99 s", "ITL p99 s"):  # fmt: skip
        phases.add_column(col, justify="left" if col == "phase" else "right")
    for p in report["phases"]:
        phases.add_row(
            p["name"], f"{p['start_s']:.0f}", f"{p['duration_s']:.0f}", str(p["requests"]),
            str(p["failed"]), _fmt(p["ttft_p50_s"]), _fmt(p["ttft_p99_s"]), _fmt(p["itl_p99_s"]),
        )  # fmt: skip
    moves = Table(title="Replicas per pool (ready / Serve's target), when they changed")
    for col in ("t s", "pool", "ready", "target"):
        moves.add_column(col, justify="right")
    for c in report["changes"]:
        moves.add_row(f"{c['t_s']:.0f}", c["pool"], str(c["ready"]), str(c["target"]))
    return Group(phases, moves)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="pdserve-demo")
    ap.add_argument("--sample-s", type=float, default=2.0)
    ap.add_argument("--scaled-replicas", type=int, default=2)
    ap.add_argument("--hold-s", type=float, default=20.0)
    ap.add_argument("--max-phase-s", type=float, default=300.0)
    ap.add_argument("--json", default=None, help="write the report here")
    ap.add_argument(
        "--report",
        default=None,
        help="write an HTML report (replicas, TTFT and answers over time, scale events marked) "
        "and the JSON it was drawn from into this folder",
    )
    args = ap.parse_args()
    report = asyncio.run(_main(args))
    console = Console()
    if not console.is_terminal:  # a log file or pipe: wide enough for every column
        console = Console(width=120)
    console.print(render(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    if args.report:
        from pdserve.report.cli import write_page_report
        from pdserve.report.elastic_page import elastic_page

        write_page_report(elastic_page(report), report, pathlib.Path(args.report), console)


if __name__ == "__main__":
    main()
