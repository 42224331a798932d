"""What the three setups share: engine settings from one pdserve config, ports, readiness,
and tear-down by process id.

Every setup is built from the same pdserve YAML (deploy/local.yaml by default), so all engines
get the same model, dtype, context length, batch limits, prefix caching, enforce_eager and
NixlConnector config (`pdserve.engine.args.engine_args`), and the same engine environment
(`engine_environment`: VLLM_CPU_KVCACHE_SPACE, core binding, NIXL progress-thread off), minus
pdserve's own engine marker. `--stock-peers` drops the CPU placement fixes for the peers.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import httpx
import psutil

from pdserve.bench.peers.procs import ProcRecord, Scope
from pdserve.bench.peers.sampler import PROC, list_pids, scope_records
from pdserve.cluster_procs import terminate_then_kill
from pdserve.config import PdserveConfig
from pdserve.engine.args import engine_args
from pdserve.kv_transfer.connector_config import engine_environment
from pdserve.names import PoolName

Log = Callable[[str], None]
START_TIMEOUT_S = 600.0
PLACEMENT_ENV = (
    "PDSERVE_NIXL_PROGRESS_THREAD",
    "PDSERVE_NIXL_KV_CORES",
    "VLLM_CPU_OMP_THREADS_BIND",
)


class SetupError(RuntimeError):
    """A setup failed to start or to answer; the message says which and where its log is."""


@dataclass(frozen=True)
class Ports:
    """Harness-private ports (never 8000/18000/6390/6391, used by other clusters here)."""

    ray_serve_llm_http: int = 8301
    plain_http: int = 8302
    pdserve_http: int = 8303
    plain_prefill_http: int = 8312
    plain_decode_http: int = 8322
    ray_serve_llm_gcs: int = 6393
    pdserve_gcs: int = 6394
    ray_serve_llm_metrics: int = 8393
    pdserve_metrics: int = 8394
    ray_serve_llm_client: int = 10393
    ray_serve_llm_agent: int = 52393
    ray_serve_llm_min_worker: int = 24000
    ray_serve_llm_max_worker: int = 24499
    side_channel: tuple[int, ...] = (23610, 23620, 23630, 23640)
    pdserve_side_channel_base: int = 23650


class Setup(Protocol):
    """One serving stack under test. `start()` returns when it answers a completion;
    `scope()` says which processes are its own; `stop()` ends all of them."""

    name: str
    url: str

    def start(self) -> None: ...

    def scope(self) -> Scope: ...

    def stop(self) -> None: ...


class PeerSetup:
    """What the two peers (Ray Serve LLM and the floor) are built from: the pdserve config whose
    engine settings they copy, the model, the harness's ports, log folder and log function,
    and whether to drop pdserve's CPU placement fixes (`stock`). Subclasses name their HTTP
    port (`_http_port`) and implement `Setup`."""

    name = ""

    def __init__(
        self,
        config: PdserveConfig,
        model_path: str,
        ports: Ports,
        log_dir: pathlib.Path,
        log: Log,
        stock: bool = False,
    ) -> None:
        self._config = config
        self._model_path = model_path
        self._ports = ports
        self._log_dir = log_dir
        self._log = log
        self._stock = stock
        self.url = f"http://127.0.0.1:{self._http_port()}"

    def _http_port(self) -> int:
        raise NotImplementedError


def peer_engine_kwargs(config: PdserveConfig, role: PoolName, model_path: str) -> dict[str, Any]:
    """The engine arguments pdserve would use for `role` (no KV events: pdserve's local
    config has them off)."""
    return engine_args(config, role, model_path)


def peer_engine_env(
    config: PdserveConfig, role: PoolName, side_channel_port: int, stock: bool
) -> dict[str, str]:
    """The engine environment pdserve would use for `role`, without PDSERVE_ENGINE_ROLE (it
    would mark a peer's front-end as an engine); `stock` also drops the placement fixes."""
    env = engine_environment(config, role, side_channel_port, "127.0.0.1")  # one machine
    env.pop("PDSERVE_ENGINE_ROLE", None)
    if stock:
        for key in PLACEMENT_ENV:
            env.pop(key, None)
    return env


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True if something accepts connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def require_free(ports: list[int], what: str) -> None:
    """Raise SetupError naming the first busy port."""
    for port in ports:
        if port_in_use(port):
            raise SetupError(f"{what}: port {port} is already in use; stop what holds it")


def _always() -> bool:
    return True


def wait_ready(
    url: str, model: str, timeout_s: float = START_TIMEOUT_S, alive: Callable[[], bool] = _always
) -> None:
    """Wait until `url` lists models and serves a 2-token completion (not a bench request)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    body = {"model": model, "prompt": "ready?", "max_tokens": 2, "temperature": 0}
    with httpx.Client(timeout=60) as client:
        while time.monotonic() < deadline:
            if not alive():
                raise SetupError(f"{url}: the server exited while starting ({last})")
            with contextlib.suppress(httpx.HTTPError):
                models = client.get(f"{url}/v1/models")
                if models.status_code == 200:
                    resp = client.post(f"{url}/v1/completions", json=body)
                    if resp.status_code == 200:
                        return
                    last = f"completion: HTTP {resp.status_code} {resp.text[:200]}"
                else:
                    last = f"/v1/models: HTTP {models.status_code}"
            time.sleep(2)
    raise SetupError(f"{url} not ready after {timeout_s:.0f} s ({last})")


def _shm_paths_of(pids: list[int]) -> set[str]:
    """/dev/shm files the given processes map or hold open."""
    used: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in (PROC / str(pid) / "maps").read_text().splitlines():
                if "/dev/shm/" in line:
                    used.add(line[line.index("/dev/shm/") :].split(" (deleted)")[0])
        with contextlib.suppress(OSError):
            for fd in (PROC / str(pid) / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("/dev/shm/"):
                        used.add(target)
    return used


def kill_scope(scope: Scope, log: Log, grace_s: float = 15.0) -> int:
    """Stop every process of a setup (SIGTERM, then SIGKILL after `grace_s`), then remove the
    /dev/shm files they used that no live process uses any more. Returns how many processes
    were signalled. Never touches processes or files outside the scope (psutil refuses to
    signal a pid that a new process reused)."""
    records = list(scope_records(scope).values())
    if not records:
        return 0
    shm = _shm_paths_of([r.pid for r in records])
    terminate_then_kill(_processes(records), grace_s)
    terminate_then_kill(
        _processes(list(scope_records(scope).values())), 1.0
    )  # children started meanwhile
    still_used = _shm_paths_of(list_pids())
    removed = 0
    for path in shm - still_used:
        with contextlib.suppress(OSError):
            pathlib.Path(path).unlink()
            removed += 1
    log(f"stopped {len(records)} processes; removed {removed} of their /dev/shm files")
    return len(records)


def _processes(records: list[ProcRecord]) -> list[psutil.Process]:
    procs = []
    for rec in records:
        if rec.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(rec.pid))
    return procs


SetupName = Literal["ray_serve_llm", "plain_vllm", "pdserve", "pdserve_proxy"]
# The default run compares the first three; pdserve_proxy is pdserve with the Helm chart's
# Serve settings (no direct ingress), asked for with --setups pdserve,pdserve_proxy.
SETUP_NAMES: tuple[SetupName, ...] = ("ray_serve_llm", "plain_vllm", "pdserve", "pdserve_proxy")
DEFAULT_SETUPS: tuple[SetupName, ...] = ("ray_serve_llm", "plain_vllm", "pdserve")
