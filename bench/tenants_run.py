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

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any

import httpx
import openai
import yaml
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pdserve.bench.tenants_config import TenantsBenchConfig
from pdserve.bench.tenants_load import LoadSpec, Outcome, run_load
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
    """The phases, each tenant's load in a process of its own (bench/tenants_load.py)."""

    def __init__(self, cfg: TenantsBenchConfig, tenants: dict[str, TenantSpec], model: str):
        self.cfg = cfg
        self.tenants = tenants
        self.model = model
        self.outcomes: list[Outcome] = []
        self.prefill_s: dict[str, float] = {}
        self.capacity_per_s = 0.0
        """Tenant A's prompts served per second in the calibration (saturating the cluster)."""
        self.flood_rate_per_s = 0.0

    def spec(self, tenant: str, phase: str, **kw: Any) -> LoadSpec:
        cfg = self.cfg
        base: dict[str, Any] = {
            "url": cfg.url, "tenant": tenant, "key": self.tenants[tenant].keys[0],
            "model": self.model, "phase": phase, "max_tokens": cfg.output_tokens,
            "max_retry_wait_s": cfg.max_retry_wait_s, "timeout_s": cfg.request_timeout_s,
        }  # fmt: skip
        return LoadSpec(**{**base, **kw})

    def run(self, pool: Executor, progress: Progress) -> None:
        cfg = self.cfg
        warm = [self.spec(name, "warmup", num_tokens=cfg.steady_tokens, fair_share=True,
                          duration_s=0.1)
                for name in (cfg.steady_tenant, cfg.flood_tenant)]  # fmt: skip
        _wait(progress, "warm-up", 0.1, [pool.submit(run_load, w) for w in warm])
        self._calibrate(pool, progress)
        for phase, share in (("alone", True), ("sharing_on", True), ("sharing_off", False)):
            jobs = [pool.submit(run_load, self.spec(
                cfg.steady_tenant, phase, num_tokens=cfg.steady_tokens, fair_share=share,
                duration_s=cfg.phase_s, rate_per_s=cfg.steady_rate_per_s,
                start_after_s=0.0 if phase == "alone" else FLOOD_HEAD_START_S,
            ))]  # fmt: skip
            if phase != "alone":
                jobs.append(pool.submit(run_load, self.spec(
                    cfg.flood_tenant, phase, num_tokens=cfg.flood_tokens, fair_share=share,
                    duration_s=FLOOD_HEAD_START_S + cfg.phase_s,
                    rate_per_s=self.flood_rate_per_s, stream=False,
                    max_attempts=cfg.flood_max_attempts,
                )))  # fmt: skip
            for outcomes in _wait(progress, phase, cfg.phase_s, jobs):
                self.outcomes += outcomes
        self._weights(pool, progress)

    def _calibrate(self, pool: Executor, progress: Progress) -> None:
        """Tenant A's prompts from many closed-loop clients, sent as the weight-3 tenant (no
        limits, so A's minute is untouched): what the cluster serves of them per second, and
        so A's fair share and its flood rate."""
        cfg = self.cfg
        ramp_s = 2.0
        job = pool.submit(run_load, self.spec(
            cfg.heavy_tenant, "calibrate", num_tokens=cfg.flood_tokens, fair_share=True,
            duration_s=ramp_s + cfg.calibrate_s, clients=cfg.calibrate_clients, stream=False,
        ))  # fmt: skip
        (done,) = _wait(progress, "calibrate", ramp_s + cfg.calibrate_s, [job])
        # Closed loops: requests start as fast as they end.
        started = [o for o in done if o.served and o.start_s >= ramp_s]
        self.capacity_per_s = len(started) / cfg.calibrate_s
        weights = self.tenants[cfg.flood_tenant].weight + self.tenants[cfg.steady_tenant].weight
        share = self.tenants[cfg.flood_tenant].weight / weights
        self.flood_rate_per_s = max(1.0, cfg.flood_share_multiple * share * self.capacity_per_s)

    def _weights(self, pool: Executor, progress: Progress) -> None:
        cfg = self.cfg
        total_s = FLOOD_HEAD_START_S + cfg.weights_s
        jobs = [
            pool.submit(
                run_load,
                self.spec(
                    name,
                    "weights",
                    num_tokens=cfg.flood_tokens,
                    fair_share=True,
                    duration_s=total_s,
                    clients=cfg.weights_clients,
                    max_tokens=cfg.weights_output_tokens,
                    stream=False,
                ),
            )
            for name in (cfg.heavy_tenant, cfg.light_tenant)
        ]
        with _shown_sync(progress, "weights", total_s) as tick:
            tick(FLOOD_HEAD_START_S)  # both backlogged first
            before = prefill_seconds(cfg.url)
            tick(cfg.weights_s)
            after = prefill_seconds(cfg.url)
        for outcomes in _wait(progress, "weights (draining)", 1.0, jobs):
            self.outcomes += outcomes
        self.prefill_s = {
            name: round(after.get(name, 0.0) - before.get(name, 0.0), 3)
            for name in (cfg.heavy_tenant, cfg.light_tenant)
        }


def _wait(progress: Progress, label: str, seconds: float, jobs: list[Future[Any]]) -> list[Any]:
    """Show `label` for about `seconds` while `jobs` run; their results, in order."""
    task = progress.add_task(label, total=seconds)
    start = time.perf_counter()
    while not all(j.done() for j in jobs):
        progress.update(task, completed=min(seconds, time.perf_counter() - start))
        time.sleep(0.25)
    progress.update(task, completed=seconds)
    return [j.result() for j in jobs]


class _shown_sync:
    """A progress row whose `tick(seconds)` sleeps that long, advancing the bar."""

    def __init__(self, progress: Progress, label: str, seconds: float):
        self._progress, self._label, self._seconds = progress, label, seconds
        self._done = 0.0

    def __enter__(self) -> Callable[[float], None]:
        task = self._progress.add_task(self._label, total=self._seconds)

        def tick(seconds: float) -> None:
            end = time.perf_counter() + seconds
            while (left := end - time.perf_counter()) > 0:
                time.sleep(min(0.25, left))
                self._progress.update(task, completed=self._done + seconds - max(0.0, left))
            self._done += seconds

        return tick

    def __exit__(self, *exc: object) -> None:
        return None


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
    try:
        # One process per tenant's load (spawned: no copy of this process's state).
        spawn = multiprocessing.get_context("spawn")
        with progress, ProcessPoolExecutor(max_workers=2, mp_context=spawn) as pool:
            run.run(pool, progress)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        return EXIT_INTERRUPTED
    heavy, light = tenants[cfg.heavy_tenant], tenants[cfg.light_tenant]
    report = build_report(
        cfg.model_dump(mode="json"), run.capacity_per_s, run.flood_rate_per_s, run.outcomes,
        cfg.phase_s,
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
