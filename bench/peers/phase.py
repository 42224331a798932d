"""Adapter: one phase = start a setup, check it, load it while sampling its CPU, stop it.

Who calls it: `main.py`, once per (round, setup). The load is `pdserve bench` run as a
subprocess with `--json`; the CPU window is that subprocess's lifetime, preceded by an idle
window of `idle_window_s` that measures the serving layer's CPU at rest.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from pdserve.bench.peers.identity import Output, fetch_outputs
from pdserve.bench.peers.profile import ensure_py_spy, start_recording, summarize
from pdserve.bench.peers.report import PhaseResult, failed_phase, phase_from_bench
from pdserve.bench.peers.sampler import ProcessSampler
from pdserve.bench.peers.setups import Log, Setup, SetupError

BENCH_TIMEOUT_S = 1200.0


@dataclass(frozen=True)
class LoadSpec:
    """The load every setup gets (the `mixed` workload of `pdserve bench`)."""

    num_requests: int = 200
    concurrency: int = 8
    short_tokens: int = 50
    long_tokens: int = 1500
    long_fraction: float = 0.5
    output_tokens: int = 32
    token_ids: bool = False

    def bench_args(self, url: str, seed: int, json_path: pathlib.Path) -> list[str]:
        """`pdserve bench` arguments for this load against `url`."""
        args = [
            "bench", "--url", url, "--workload", "mixed",
            "--num-requests", str(self.num_requests), "--concurrency", str(self.concurrency),
            "--short-tokens", str(self.short_tokens), "--long-tokens", str(self.long_tokens),
            "--long-fraction", str(self.long_fraction),
            "--output-tokens", str(self.output_tokens),
            "--seed", str(seed), "--json", str(json_path),
        ]  # fmt: skip
        return [*args, "--token-ids"] if self.token_ids else args


def machine_busy_ticks() -> int:
    """Non-idle CPU ticks of the whole machine so far (first line of /proc/stat)."""
    fields = [int(x) for x in pathlib.Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # minus idle and iowait


def run_bench(
    load: LoadSpec, url: str, seed: int, out_dir: pathlib.Path, tag: str
) -> tuple[dict[str, Any], int]:
    """Run `pdserve bench`; return its JSON report and the bench process's pid."""
    json_path = out_dir / f"bench-{tag}.json"
    pdserve = str(pathlib.Path(sys.executable).with_name("pdserve"))
    with (out_dir / f"bench-{tag}.txt").open("wb") as out:
        proc = subprocess.Popen(
            [pdserve, *load.bench_args(url, seed, json_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "140"},
        )
        try:
            proc.wait(timeout=BENCH_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            raise SetupError(f"pdserve bench against {url} timed out") from exc
    if not json_path.exists():
        raise SetupError(f"pdserve bench against {url} exited {proc.returncode}, no JSON")
    report: dict[str, Any] = json.loads(json_path.read_text())
    return report, proc.pid


@dataclass
class PhaseRunner:
    """Runs phases; collects identity outputs and profiles on the side."""

    load: LoadSpec
    model_id: str
    out_dir: pathlib.Path
    log: Log
    interval_s: float = 0.2
    idle_window_s: float = 5.0
    profile_s: float = 0.0
    retries: int = 1
    max_error_fraction: float = 0.05
    identity: dict[str, dict[str, Output]] = dataclasses.field(default_factory=dict)
    profiles: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def run(self, setup: Setup, round_index: int) -> PhaseResult:
        """Start, check, load, stop; a failed phase (start-up, or more than
        `max_error_fraction` failed requests) is retried `retries` times, then recorded."""
        result = self._run_once(setup, round_index)
        for attempt in range(self.retries):
            if result.error is None:
                break
            self.log(f"{setup.name} round {round_index}: retry {attempt + 1}")
            result = self._run_once(setup, round_index)
        return result

    def _run_once(self, setup: Setup, round_index: int) -> PhaseResult:
        tag = f"{setup.name}-r{round_index}"
        try:
            t0 = time.monotonic()
            setup.start()
            self.log(f"{setup.name} ready after {time.monotonic() - t0:.0f} s")
            if setup.name not in self.identity:
                self.identity[setup.name] = fetch_outputs(setup.url, self.model_id)
            result = self._measure(setup, round_index, tag)
            if result.num_errors > self.max_error_fraction * max(1, result.num_requests):
                raise SetupError(f"{result.num_errors} of {result.num_requests} requests failed")
            if self.profile_s > 0 and setup.name not in self.profiles:
                try:
                    self.profiles[setup.name] = self._profile(setup, round_index)
                except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                    self.log(f"{setup.name}: profiling failed ({exc}); results unaffected")
                    self.profiles[setup.name] = {"error": str(exc)[:500]}
            return result
        except SetupError as exc:
            self.log(f"{setup.name} round {round_index}: {exc}")
            return failed_phase(setup.name, round_index, str(exc)[:2000])
        finally:
            setup.stop()

    def _measure(self, setup: Setup, round_index: int, tag: str) -> PhaseResult:
        with ProcessSampler(setup.scope(), self.interval_s) as sampler:
            time.sleep(1.0)
            sampler.open_window()
            time.sleep(self.idle_window_s)
            sampler.sample_once()
            idle = sampler.totals()
            idle_ms_per_s = 1000.0 * idle.serving_s / self.idle_window_s
            sampler.open_window()
            t0, busy0 = time.monotonic(), machine_busy_ticks()
            self.log(f"{setup.name} round {round_index}: {self.load.num_requests} requests")
            bench, bench_pid = run_bench(self.load, setup.url, round_index + 1, self.out_dir, tag)
            sampler.sample_once()
            window_s = time.monotonic() - t0
            busy_cores = (machine_busy_ticks() - busy0) / os.sysconf("SC_CLK_TCK") / window_s
            cpu = sampler.totals(excluded=frozenset({os.getpid(), bench_pid}))
        (self.out_dir / f"cpu-{tag}.json").write_text(
            json.dumps([dataclasses.asdict(p) for p in cpu.processes], indent=1)
        )
        result = phase_from_bench(setup.name, round_index, bench, cpu, window_s, idle_ms_per_s)
        idle_top = tuple((p.name, p.cpu_s) for p in idle.top("serving", 5))
        result = dataclasses.replace(
            result, machine_busy_cores=busy_cores, idle_top_serving=idle_top
        )
        self.log(
            f"{setup.name} round {round_index}: {result.requests_per_s or 0:.2f} req/s, "
            f"serving CPU {result.serving_cpu_ms_per_request or 0:.1f} ms/req, "
            f"errors {result.num_errors}"
        )
        return result

    def _profile(self, setup: Setup, round_index: int) -> dict[str, Any]:
        """py-spy on the (up to) 3 busiest Python serving processes during an extra load."""
        py_spy = ensure_py_spy(self.log)
        cpu_rows = json.loads((self.out_dir / f"cpu-{setup.name}-r{round_index}.json").read_text())
        targets = [
            r for r in cpu_rows
            if r["proc_class"] == "serving" and not r["exited"]
            and not r["name"].startswith(("raylet", "gcs_server"))
        ][:3]  # fmt: skip
        recorders = []
        for row in targets:
            out = self.out_dir / f"pyspy-{setup.name}-{row['pid']}.txt"
            recorders.append((row, out, start_recording(py_spy, row["pid"], self.profile_s, out)))
        self.log(f"{setup.name}: profiling {[r['name'] for r in targets]} under an extra load")
        try:
            run_bench(self.load, setup.url, 1000 + round_index, self.out_dir, f"{setup.name}-prof")
        except SetupError as exc:
            self.log(f"profiling load failed: {exc}")
        summaries: dict[str, Any] = {}
        for row, out, proc in recorders:
            try:
                proc.wait(timeout=self.profile_s + 30)
            except subprocess.TimeoutExpired:
                proc.kill()
            text = out.read_text(errors="replace") if out.exists() else ""
            summary = summarize(text)
            summaries[f"{row['name']} (pid {row['pid']})"] = dataclasses.asdict(summary)
        return summaries
