"""Shared helpers of the cluster tests (plain code, no fixtures): the test ports, `Cluster` (a
running cluster as the tests see it), starting and stopping a cluster with the real `pdserve up`
/ `pdserve down`, and the plain vLLM reference server.

The fixtures that use them live in the conftests: the session cluster and the reference server
in tests/integration/conftest.py, each package's own cluster in its conftest.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import psutil
import pytest
import yaml

from pdserve import cluster_procs
from pdserve.config import PdserveConfig, load_config
from pdserve.model_source import resolve_model

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROUTER_PORT = 14000
"""The test clusters' routers listen on 14000-14500 (this one, and the 2P1D, two-node,
autoscale and aggregated packages' 14200-14500), like the reference server below: outside the
engines' NIXL side-channel and KV-event ports (15600-18596: base + a hash of the replica id),
which another cluster may hold, and outside Ray's worker ports (20000-29999)."""
REFERENCE_PORT = 14100
"""The plain vLLM server the parity tests compare against (same ranges avoided)."""
RAY_PORT = 6391
RAY_METRICS_PORT = 8082  # outside Ray worker ports (10002-19999)
START_TIMEOUT_S = 600
UP_TIMEOUT_S = START_TIMEOUT_S - 90  # `pdserve up` gives up first and says why
PDSERVE = str(pathlib.Path(sys.executable).with_name("pdserve"))


@dataclass(frozen=True)
class Cluster:
    url: str
    config: PdserveConfig
    model_path: str
    api_key: str | None = None
    """The key the router enforces (started with PDSERVE_API_KEY set); None: open."""

    def client(self) -> openai.OpenAI:
        key = self.api_key or "unused"
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    def http(self, timeout_s: float = 60) -> httpx.Client:
        """An HTTP client for the router that sends the cluster's key, if any."""
        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(base_url=self.url, timeout=timeout_s, headers=headers)

    def wait_idle(
        self, pools: tuple[str, ...] = ("prefill", "decode"), timeout_s: float = 60
    ) -> None:
        """Until the router's view (`/v1/pdserve/replicas`) has every replica of `pools` idle:
        nothing running, waiting or queued for prefill. An earlier test's load (an overload
        burst, abandoned streams) can still be draining; on a busy pool the policy rightly
        places differently (spills to decode, or keeps a prompt off a decode engine whose
        streams it would stall), which is not what a placement test exercises."""
        deadline = time.monotonic() + timeout_s
        with self.http() as http:
            while True:
                view = http.get("/v1/pdserve/replicas").json()["pools"]
                busy = [
                    r for pool in pools for r in view.get(pool, [])
                    if r["running"] or r["waiting"] or r["queued_prefill_tokens"]
                ]  # fmt: skip
                if all(view.get(pool) for pool in pools) and not busy:
                    return
                assert time.monotonic() < deadline, f"still busy after {timeout_s} s: {busy}"
                time.sleep(0.2)

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        """The sum of the samples of `name` whose labels include `labels` (0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in (labels or {}).items()
                ):
                    total += float(sample.value)
        return total


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server and every process it started (vLLM's engine core would outlive it)."""
    tree: list[psutil.Process] = []
    with contextlib.suppress(psutil.NoSuchProcess):
        tree = psutil.Process(proc.pid).children(recursive=True)
    proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    proc.kill()
    for child in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


def wait_http(url: str, proc: subprocess.Popen[bytes] | None, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server for {url} exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(1)
    raise TimeoutError(f"{url} not ready after {timeout_s} s")


def start_reference(
    model_path: str, cfg: PdserveConfig, log: pathlib.Path
) -> subprocess.Popen[bytes]:
    eng = cfg.decode.engine
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_path,
        "--served-model-name",
        cfg.model.served_model_name,
        "--dtype",
        cfg.model.dtype,
        "--max-model-len",
        str(cfg.model.max_model_len_tokens),
        "--max-num-batched-tokens",
        str(eng.max_num_batched_tokens),
        "--seed",
        str(cfg.model.seed),
        "--host",
        "127.0.0.1",
        "--port",
        str(REFERENCE_PORT),
        "--enforce-eager",
        "--disable-log-stats",
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1"}
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)


def run_up(
    pdserve: str, cfg_path: pathlib.Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`pdserve up --detach`, bounded by its own timeout (so a stuck start reports which
    deployment is stuck) well inside the test's. A cluster left on the same Ray port by an
    earlier, killed run is stopped first (`up` would otherwise deploy onto it)."""
    subprocess.run([pdserve, "down"], env=env, capture_output=True, timeout=120)
    return subprocess.run(
        [pdserve, "up", "--detach", "--config", str(cfg_path), "--timeout-s", str(UP_TIMEOUT_S)],
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
    )


def startup_failure(up: subprocess.CompletedProcess[str]) -> str:
    """What `pdserve up` printed plus the ends of the newest Serve replica logs."""
    parts = [f"pdserve up failed:\n{up.stdout[-4000:]}\n{up.stderr[-3000:]}"]
    logs = sorted(
        pathlib.Path("/tmp/ray/session_latest/logs/serve").glob("replica_*.log"),
        key=lambda p: p.stat().st_mtime,
    )
    for log in logs[-4:]:
        parts.append(f"--- {log.name} (end) ---\n{log.read_text(errors='replace')[-2500:]}")
    return "\n".join(parts)


def merged(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` on top: nested mappings merged key by key, anything else
    replaced."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def start_cluster(
    config_file: str,
    tmp: pathlib.Path,
    router_port: int,
    ray_port: int,
    metrics_port: int,
    api_key: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> tuple[Cluster, dict[str, str]]:
    """`pdserve up --detach` on private ports (with PDSERVE_API_KEY set when `api_key` is),
    with `overrides` merged into the config (nested mappings key by key) and `extra_env` in
    the environment of `up` (so of every Ray worker and engine); returns the cluster and the
    env for `down`."""
    raw = merged(yaml.safe_load((ROOT / "deploy" / config_file).read_text()), overrides or {})
    raw["router"]["port"] = router_port
    cfg_path = tmp / "test.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(cfg_path)
    env = {
        **os.environ,
        "PDSERVE_STATE_DIR": str(tmp / "state"),
        "PDSERVE_RAY_PORT": str(ray_port),
        "PDSERVE_RAY_METRICS_PORT": str(metrics_port),
    }
    env.pop("PDSERVE_API_KEY", None)
    env.update(extra_env or {})
    if api_key is not None:
        env["PDSERVE_API_KEY"] = api_key
    up = run_up(PDSERVE, cfg_path, env)
    if up.returncode != 0:
        subprocess.run([PDSERVE, "down"], env=env, capture_output=True, timeout=120)
        raise RuntimeError(startup_failure(up))
    url = f"http://127.0.0.1:{router_port}"
    return Cluster(url, cfg, resolve_model(cfg.model), api_key), env


def package_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    config_file: str,
    ports: tuple[int, int, int],
    api_key: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[Cluster]:
    """A package's own cluster from `deploy/<config_file>` (with `overrides` and `extra_env`,
    as `start_cluster`) on (router, Ray, Ray metrics) `ports`: started, yielded, then stopped;
    `down` must leave nothing behind."""
    shm_before = cluster_procs.shm_snapshot()
    router_port, ray_port, metrics_port = ports
    tmp = tmp_path_factory.mktemp(config_file.removesuffix(".yaml"))
    cluster, env = start_cluster(
        config_file, tmp, router_port, ray_port, metrics_port, api_key, overrides, extra_env
    )
    try:
        yield cluster
    finally:
        stop_cluster(env, shm_before, ports=ports)


def stop_cluster(
    env: dict[str, str], shm_before: set[str] | None = None, ports: tuple[int, ...] = ()
) -> None:
    """`pdserve down`; with `shm_before` (the /dev/shm entries before `up`), also assert that
    nothing of the cluster is left: no Ray or engine process, no stale buffer, none of `ports`
    listening."""
    down = subprocess.run([PDSERVE, "down"], env=env, capture_output=True, text=True, timeout=120)
    if shm_before is not None:
        scope = cluster_procs.Scope(int(env["PDSERVE_RAY_PORT"]))
        left = cluster_procs.leftovers(scope, shm_before, ports)
        assert not left, f"`pdserve down` left behind: {left}\n{down.stdout[-2000:]}"
