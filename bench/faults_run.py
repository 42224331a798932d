"""`pdserve bench-faults` (adapter): steady load, a real fault, recovery, one table row each.

For each fault: a steady stream load runs on the cluster, the fault hits one real engine
process, and the run waits until the cluster has recovered (the replaced replica reports
healthy), keeps the load `tail_s` longer and judges every request (bench/faults.py). The
client-gone fault has its own shape: after a few requests (so the decode engine has pulled
from every prefill engine), the decode engine is stopped, long prompts are sent and
prefilled, the clients leave before any token, the decode engine resumes, and the run times
how long the prefill engines hold the abandoned KV.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import httpx
import psutil
from rich.console import Console

from pdserve.bench.fault_inject import (
    FaultError,
    engine_cores,
    healthy_ids,
    kv_usage,
    replicas,
    signal_engine,
    wait_replaced,
)
from pdserve.bench.fault_load import SteadyLoad, completion_body, prompt_of_words, send_one
from pdserve.bench.faults import FaultName, FaultRow, Outcome, markdown_table, summarize
from pdserve.bench.faults_config import FaultsConfig
from pdserve.names import PoolName
from pdserve.router.auth import client_headers
from pdserve.router.headers import POLICY_HEADER

KV_IDLE_SLACK = 1e-4
"""KV usage within this of its idle level counts as idle."""


@dataclass(frozen=True)
class FaultRun:
    """One fault's row and the outcomes behind it (tests assert on both)."""

    row: FaultRow
    outcomes: list[Outcome]
    fault_s: float
    victim_gone: bool = True
    """The faulted engine process was gone at the end (a frozen one: killed by its replica,
    not by this run's clean-up)."""


class FaultRunner:
    """Runs faults against one cluster; `http` carries the API key (PDSERVE_API_KEY)."""

    def __init__(self, cfg: FaultsConfig, http: httpx.AsyncClient, model: str):
        self._cfg = cfg
        self._http = http
        self._model = model
        self._salt = int(time.time() * 1000) % 1_000_000  # fresh prompts every run
        self._headers = {POLICY_HEADER: cfg.policy} if cfg.policy else {}
        ray_port = cfg.ray_port or int(os.environ.get("PDSERVE_RAY_PORT", "6390"))
        self._ray_port = ray_port

    async def run(self, fault: FaultName) -> FaultRun:
        if fault == "client-gone":
            return await self._client_gone()
        return await self._under_load(fault)

    def _body(self, n: int, words: int, max_tokens: int | None = None) -> dict[str, Any]:
        self._salt += 1
        prompt = prompt_of_words(words, self._salt * 1000 + n)
        return completion_body(self._model, prompt, max_tokens or self._cfg.output_tokens)

    async def _under_load(self, fault: FaultName) -> FaultRun:
        cfg = self._cfg
        pool: PoolName = "decode" if fault == "kill-decode" else "prefill"
        before = await healthy_ids(self._http, pool)
        victim = engine_cores(self._ray_port, pool)[0]
        tokens = cfg.stream_tokens if fault == "kill-decode" else cfg.output_tokens
        load = SteadyLoad(
            self._http,
            cfg.clients,
            cfg.rate_per_s,
            lambda n: self._body(n, cfg.prompt_words, tokens),
            self._headers,
            cfg.request_timeout_s,
        )
        load.start()
        try:
            await asyncio.sleep(cfg.warmup_s)
            if fault == "kill-decode":
                await self._until_decoding()  # mid-stream: that is the fault
            fault_s = time.monotonic()
            signal_engine(victim, signal.SIGSTOP if fault == "freeze-prefill" else signal.SIGKILL)
            recovered = await wait_replaced(self._http, pool, before, cfg.recover_timeout_s)
            await asyncio.sleep(cfg.tail_s)
        finally:
            outcomes = await load.stop()
            gone = not _alive(victim)
            if not gone:  # never leave a stopped engine behind
                signal_engine(victim, signal.SIGKILL)
        recovered_s = None if recovered is None else recovered - fault_s
        row = summarize(fault, cfg.clients, outcomes, fault_s, recovered_s)
        return FaultRun(row, outcomes, fault_s, gone)

    async def _until_decoding(self, timeout_s: float = 30.0) -> None:
        """Wait until the decode pool reports running requests (streams in flight)."""
        deadline = time.monotonic() + timeout_s
        while sum(r["running"] for r in await replicas(self._http, "decode")) == 0:
            if time.monotonic() > deadline:
                raise FaultError(f"no stream was decoding after {timeout_s:g} s of load")
            await asyncio.sleep(0.1)

    async def _settled_kv_usage(self, pool: PoolName, timeout_s: float = 15.0) -> float:
        """The pool's KV usage once two readings a second apart agree (the last requests' KV
        is released after their decode pulled it, and the router rereads the engines' stats
        every second): an idle level taken before that would hide the next prompts' KV."""
        last = await kv_usage(self._http, pool)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            now = await kv_usage(self._http, pool)
            if abs(now - last) <= KV_IDLE_SLACK:
                return now
            last = now
        return last

    async def _client_gone(self) -> FaultRun:
        cfg = self._cfg
        # A serving cluster's decode engines have pulled from every prefill engine (NIXL
        # connects on the first pull; a release rides that connection): do so first.
        for n in range(2 * len(await replicas(self._http, "prefill"))):
            await send_one(self._http, self._body(n, cfg.gone_prompt_words), self._headers,
                           cfg.request_timeout_s)  # fmt: skip
        idle = await self._settled_kv_usage("prefill")
        decode = engine_cores(self._ray_port, "decode")[0]
        signal_engine(decode, signal.SIGSTOP)
        stopped_s = time.monotonic()
        tasks: list[asyncio.Task[Outcome]] = []
        try:
            tasks = [
                asyncio.create_task(
                    send_one(
                        self._http,
                        self._body(n, cfg.gone_prompt_words),
                        self._headers,
                        cfg.request_timeout_s,
                    )
                )
                for n in range(cfg.clients)
            ]
            while await kv_usage(self._http, "prefill") <= idle + KV_IDLE_SLACK:
                if time.monotonic() - stopped_s > cfg.gone_stall_s - 2:
                    raise FaultError("the prefills never held KV: nothing to abandon")
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.5)  # let the other prefills land too
            fault_s = time.monotonic()
            for task in tasks:
                task.cancel()  # the clients leave before the first token
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(1.0)  # the router closes each decode stream and releases
        finally:
            signal_engine(decode, signal.SIGCONT)
        deadline = fault_s + cfg.recover_timeout_s
        recovered: float | None = None
        while time.monotonic() < deadline:
            if await kv_usage(self._http, "prefill") <= idle + KV_IDLE_SLACK:
                recovered = time.monotonic()
                break
            await asyncio.sleep(0.2)
        outcomes = [
            Outcome(stopped_s, fault_s, None, False, abandoned=True) for _ in range(len(tasks))
        ]
        recovered_s = None if recovered is None else recovered - fault_s
        row = summarize("client-gone", cfg.clients, outcomes, fault_s, recovered_s)
        return FaultRun(row, outcomes, fault_s)


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


async def first_model(http: httpx.AsyncClient) -> str:
    resp = await http.get("/v1/models")
    if resp.status_code != 200:
        raise FaultError(f"GET /v1/models answered {resp.status_code}: {resp.text[:300]}")
    return str(resp.json()["data"][0]["id"])


def client(cfg: FaultsConfig) -> httpx.AsyncClient:
    """The HTTP client of a run (sends PDSERVE_API_KEY's first key, as pdserve's tools do)."""
    pool = cfg.clients + 8
    return httpx.AsyncClient(
        base_url=cfg.url.rstrip("/"),
        headers=client_headers(os.environ),
        timeout=httpx.Timeout(cfg.request_timeout_s, connect=30.0),
        limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
    )


def run_bench_faults(cfg: FaultsConfig, console: Console) -> int:
    """Run every configured fault, print the reliability table; exit 1 when a request was lost
    or the cluster did not recover."""

    async def main() -> list[FaultRun]:
        async with client(cfg) as http:
            runner = FaultRunner(cfg, http, cfg.model or await first_model(http))
            runs = []
            for fault in cfg.faults:
                console.print(f"[bold]{fault}[/bold]: injecting under load ...")
                run = await runner.run(fault)
                console.print(
                    f"  sent {run.row.sent}, lost {run.row.lost}, recovered after "
                    f"{run.row.recovered_s if run.row.recovered_s is not None else 'never'} s"
                )
                runs.append(run)
            return runs

    try:
        runs = asyncio.run(main())
    except (FaultError, httpx.HTTPError) as exc:
        console.print(f"[red]bench-faults: {exc}[/red]")
        return 2
    rows = [r.row for r in runs]
    console.print(markdown_table(rows), markup=False, highlight=False, soft_wrap=True)
    from pdserve.report.faults_page import faults_document, faults_page

    doc = faults_document(
        cfg.model_dump(mode="json"), [(r.row, r.outcomes, r.fault_s) for r in runs]
    )
    if cfg.json_path is not None:
        cfg.json_path.write_text(json.dumps(doc, indent=2) + "\n")
    if cfg.report_dir is not None:
        from pdserve.report.cli import write_page_report

        write_page_report(faults_page(doc), doc, cfg.report_dir, console)
    failed = [r for r in rows if r.lost or r.recovered_s is None]
    return 1 if failed else 0
