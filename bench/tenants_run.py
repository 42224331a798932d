"""`pdserve bench-tenants`: one run on a cluster started with a tenant key file
(deploy/local-tenants.yaml), four phases:

1. `alone`: tenant B sends a steady fixed-rate load of prompts long enough to prefill remotely;
2. `sharing_on`: the same while tenant A floods long prompts from many closed-loop clients;
3. `sharing_off`: the same with every request sent `x-pdserve-fair-share: off` (the cluster
   needs router.allow_policy_override), i.e. the tiers first come, first served;
4. `weights`: two tenants of weights 3 and 1 both saturate the prefill tier; the router's
   engine-reported prefill seconds per tenant (pdserve_tenant_prefill_seconds_total) over the
   window give the split.
Then the report and its checks (bench/tenants_report.py). Exit 0 when every check passes.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import yaml
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pdserve.bench.tenants_config import TenantsBenchConfig
from pdserve.bench.tenants_load import Outcome, TenantClient, closed_loop, open_loop
from pdserve.bench.tenants_report import build_report, phases_table, summary_lines
from pdserve.tenant_config import TenantFile, TenantSpec

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130
FLOOD_HEAD_START_S = 5.0
"""Tenant A floods this long before B's phase starts (its queue is full by then)."""


class BenchSetupError(RuntimeError):
    """The bench cannot run: its key file, a tenant, or the server."""


def read_tenants(cfg: TenantsBenchConfig) -> dict[str, TenantSpec]:
    try:
        doc = yaml.safe_load(cfg.key_file.read_text())
        tenants = {t.name: t for t in TenantFile.model_validate(doc).tenants}
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise BenchSetupError(f"cannot use the key file {cfg.key_file}: {exc}") from exc
    for name in (cfg.flood_tenant, cfg.steady_tenant, cfg.heavy_tenant, cfg.light_tenant):
        spec = tenants.get(name)
        if spec is None or not spec.keys:
            raise BenchSetupError(
                f"tenant {name!r} is not in {cfg.key_file} with a plain key (`keys:`)"
            )
    return tenants


def prefill_seconds(url: str) -> dict[str, float]:
    """pdserve_tenant_prefill_seconds_total per tenant from the router's /metrics."""
    text = httpx.get(url.rstrip("/") + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "pdserve_tenant_prefill_seconds":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    out[sample.labels["tenant"]] = sample.value
    return out


class _Run:
    def __init__(self, cfg: TenantsBenchConfig, tenants: dict[str, TenantSpec], model: str):
        self.cfg = cfg
        self.outcomes: list[Outcome] = []
        self.prefill_s: dict[str, float] = {}

        def client(name: str) -> TenantClient:
            return TenantClient(
                cfg.url, name, tenants[name].keys[0], model,
                max_tokens=cfg.output_tokens, timeout_s=cfg.request_timeout_s,
                max_retry_wait_s=cfg.max_retry_wait_s, seed=0,
            )  # fmt: skip

        self.steady = client(cfg.steady_tenant)
        self.flood = client(cfg.flood_tenant)
        self.heavy = client(cfg.heavy_tenant)
        self.light = client(cfg.light_tenant)

    async def close(self) -> None:
        for c in (self.steady, self.flood, self.heavy, self.light):
            await c.close()

    async def run(self, progress: Progress) -> None:
        cfg = self.cfg
        t0 = time.perf_counter()
        warm: list[Outcome] = []
        for c in (self.steady, self.flood, self.heavy, self.light):  # not measured
            warm.append(await c.send("warmup", cfg.steady_tokens, True, t0))
        for phase, share in (("alone", True), ("sharing_on", True), ("sharing_off", False)):
            with _shown(progress, phase, cfg.phase_s):
                stop = asyncio.Event()
                flood = None
                if phase != "alone":
                    flood = asyncio.create_task(closed_loop(
                        self.flood, cfg.flood_clients, phase, cfg.flood_tokens, share, stop,
                        t0, self.outcomes,
                    ))  # fmt: skip
                    await asyncio.sleep(FLOOD_HEAD_START_S)
                await open_loop(
                    self.steady, cfg.steady_rate_per_s, cfg.phase_s, phase, cfg.steady_tokens,
                    share, t0, self.outcomes,
                )  # fmt: skip
                stop.set()
                if flood is not None:
                    await flood
        with _shown(progress, "weights", cfg.weights_s):
            stop = asyncio.Event()
            loops = [
                asyncio.create_task(
                    closed_loop(
                        c,
                        cfg.weights_clients,
                        "weights",
                        cfg.flood_tokens,
                        True,
                        stop,
                        t0,
                        self.outcomes,
                    )
                )
                for c in (self.heavy, self.light)
            ]
            await asyncio.sleep(FLOOD_HEAD_START_S)  # both backlogged first
            before = await asyncio.to_thread(prefill_seconds, cfg.url)
            await asyncio.sleep(cfg.weights_s)
            after = await asyncio.to_thread(prefill_seconds, cfg.url)
            stop.set()
            await asyncio.gather(*loops)
        self.prefill_s = {
            name: round(after.get(name, 0.0) - before.get(name, 0.0), 3)
            for name in (cfg.heavy_tenant, cfg.light_tenant)
        }


class _shown:
    """A progress row for one phase, ticking its elapsed seconds."""

    def __init__(self, progress: Progress, phase: str, seconds: float):
        self._progress, self._phase, self._seconds = progress, phase, seconds

    def __enter__(self) -> None:
        self._task = self._progress.add_task(self._phase, total=self._seconds)
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        start = time.perf_counter()
        while True:
            done_s = min(self._seconds, time.perf_counter() - start)
            self._progress.update(self._task, completed=done_s)
            await asyncio.sleep(0.5)

    def __exit__(self, *exc: object) -> None:
        self._ticker.cancel()
        self._progress.update(self._task, completed=self._seconds)


def _first_model(cfg: TenantsBenchConfig, key: str) -> str:
    if cfg.model is not None:
        return cfg.model
    try:
        client = openai.OpenAI(base_url=cfg.url.rstrip("/") + "/v1", api_key=key, max_retries=1)
        return next(iter(m.id for m in client.models.list()))
    except (openai.APIError, StopIteration) as exc:
        raise BenchSetupError(f"GET {cfg.url}/v1/models failed: {exc!r}") from exc


def run_tenants(cfg: TenantsBenchConfig, console: Console) -> int:
    try:
        tenants = read_tenants(cfg)
        model = _first_model(cfg, tenants[cfg.steady_tenant].keys[0])
    except BenchSetupError as exc:
        console.print(f"[red]bench-tenants failed:[/red] {exc}")
        return EXIT_FAILED
    run = _Run(cfg, tenants, model)
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console
    )

    async def main() -> None:
        try:
            await run.run(progress)
        finally:
            await run.close()

    try:
        with progress:
            asyncio.run(main())
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        return EXIT_INTERRUPTED
    heavy, light = tenants[cfg.heavy_tenant], tenants[cfg.light_tenant]
    report = build_report(
        cfg.model_dump(mode="json"), run.outcomes, cfg.phase_s,
        cfg.steady_tenant, cfg.flood_tenant,
        {name: spec.limits for name, spec in tenants.items()},
        run.prefill_s, cfg.heavy_tenant, cfg.light_tenant, heavy.weight / light.weight,
        max_ttft_ratio=cfg.max_ttft_ratio, max_degradation_share=cfg.max_degradation_share,
        weight_tolerance=cfg.weight_tolerance,
    )  # fmt: skip
    console.print(phases_table(report))
    for line in summary_lines(report):
        console.print(line)
    if cfg.json_path is not None:
        cfg.json_path.parent.mkdir(parents=True, exist_ok=True)
        cfg.json_path.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
        console.print(f"JSON report written to {cfg.json_path}")
    return EXIT_OK if report.passed else EXIT_FAILED
