"""Start and stop a local pdserve cluster: a Ray head on this machine plus the Serve app.

Used by `pdserve up` / `pdserve down`. `up` records what it started in a state file so that
`down` stops exactly that (and cleans the shared-memory buffers engines leave in /dev/shm).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import psutil

from pdserve.config import PdserveConfig

STATE_DIR = pathlib.Path(os.environ.get("PDSERVE_STATE_DIR", "~/.cache/pdserve/run")).expanduser()
RAY_PORT = int(os.environ.get("PDSERVE_RAY_PORT", "6390"))
# Ray's Prometheus export: the engines' own vllm: metrics (and Ray/Serve metrics) of this node.
RAY_METRICS_PORT = int(os.environ.get("PDSERVE_RAY_METRICS_PORT", "8081"))
# Ray Serve's throughput-optimized mode: direct ingress (the Router replica itself serves HTTP
# on router.port, skipping the hop through the proxy actor), user code and handle routing on
# the replica's main loop, gRPC between handles, no per-request stderr logging.
# The Serve controller's control loop runs every 0.5 s instead of 0.1 s: at rest it was the
# largest CPU user of the cluster (~40 ms/s of a 2-core machine's CPU); replicas take 30+ s
# to start, so reacting within 0.5 s instead of 0.1 s changes nothing a user sees.
# PDSERVE_LEAN_SERVE=0 falls back to Ray Serve's defaults (HTTP through the proxy actor).
LEAN_SERVE = os.environ.get("PDSERVE_LEAN_SERVE", "1") == "1"
# With direct ingress the head still runs a proxy; it listens this far above router.port.
PROXY_PORT_OFFSET = 1000


def _serve_env(config: PdserveConfig) -> dict[str, str]:
    """Ray Serve settings the controller and replicas read from the environment."""
    if not LEAN_SERVE:
        return {}
    port = config.router.port
    return {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
        "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
        # The throughput mode buffers 1,000 log records per replica before writing: with
        # access logs off, what is logged (pdserve's warnings: failures, fallbacks, dead
        # engines) is rare and wanted at once.
        "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": "1",
        "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(port),
        "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(port + 64),
    }


# Ray's object store is only used for small control messages here; keep it small.
OBJECT_STORE_BYTES = 512 << 20


class ClusterError(RuntimeError):
    """The cluster could not be started; the message says why and what to do."""


@dataclass(frozen=True)
class DeploymentProgress:
    """One line of start-up progress per deployment."""

    name: str
    status: str
    num_running: int
    num_target: int
    message: str


def _ray_bin() -> str:
    return str(pathlib.Path(sys.executable).with_name("ray"))


def _state_file() -> pathlib.Path:
    return STATE_DIR / "state.json"


def _shm_snapshot() -> set[str]:
    return set(glob.glob("/dev/shm/*"))


def worker_ports(ray_port: int) -> tuple[int, int]:
    """The port range (inclusive) for the Ray workers of the cluster on `ray_port`: 1,000
    ports in 20000-29999, apart for clusters whose Ray ports differ in the last digit, and
    clear of pdserve's listeners (8000s, 15600-18600) and of the OS's ephemeral ports."""
    low = 20000 + (ray_port % 10) * 1000
    return low, low + 999


def start_ray(config: PdserveConfig) -> bool:
    """Start a Ray head for pdserve unless one is reachable; True if this call started it."""
    if _ray_reachable():
        return False
    cmd = [
        _ray_bin(),
        "start",
        "--head",
        f"--port={RAY_PORT}",
        f"--num-cpus={os.cpu_count() or 1}",
        f"--object-store-memory={OBJECT_STORE_BYTES}",
        "--include-dashboard=false",
        # The log monitor tails every worker's log to forward it to drivers; pdserve's driver
        # takes no worker logs (they stay in the session's log files), so it only cost CPU.
        "--include-log-monitor=false",
        f"--metrics-export-port={RAY_METRICS_PORT}",
        # Ray's default worker ports (10002-19999) overlap pdserve's own listeners (router
        # proxy, NIXL side channels, KV events): a worker holding one made a later cluster's
        # Serve proxy fail to bind. Workers get a range of their own, per Ray port.
        f"--min-worker-port={worker_ports(RAY_PORT)[0]}",
        f"--max-worker-port={worker_ports(RAY_PORT)[1]}",
        "--disable-usage-stats",
    ]
    # Ray starts workers at nice 15 and engines inherit it; on a small machine the engines
    # and the HTTP path are the work itself, so run them at normal priority.
    env = {**os.environ, "RAY_worker_niceness": "0", **_serve_env(config)}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise ClusterError(f"`ray start` failed:\n{proc.stderr.strip() or proc.stdout.strip()}")
    return True


def _ray_reachable() -> bool:
    proc = subprocess.run(
        [_ray_bin(), "status", f"--address=127.0.0.1:{RAY_PORT}"],
        capture_output=True,
        check=False,
    )
    return proc.returncode == 0


def deploy(
    config: PdserveConfig,
    on_progress: Callable[[list[DeploymentProgress]], None],
    timeout_seconds: float = 900.0,
) -> None:
    """Deploy the Serve app and wait until every deployment is healthy.

    Calls `on_progress` about once a second while engines start. Raises ClusterError when a
    deployment fails or the timeout passes.
    """
    # The app's deployment handles are made here, in the driver, and keep the options of this
    # process: give it the cluster's Serve settings before Serve reads them at import.
    os.environ.update(_serve_env(config))
    import ray
    from ray import serve

    from pdserve.deploy.app import build_from_config

    STATE_DIR.mkdir(parents=True, exist_ok=True)
    ray.init(address=f"127.0.0.1:{RAY_PORT}", logging_level="ERROR", log_to_driver=False)
    proxy_port = config.router.port + (PROXY_PORT_OFFSET if LEAN_SERVE else 0)
    serve.start(http_options={"host": config.router.host, "port": proxy_port})
    app = build_from_config(config)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            serve.run(app, name=config.app_name, route_prefix="/", blocking=False)
        except BaseException as exc:  # reported to the waiting thread below
            failure.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    deadline = time.monotonic() + timeout_seconds
    while worker.is_alive():
        rows = _progress(config.app_name)
        on_progress(rows)
        if time.monotonic() > deadline:
            raise ClusterError(
                f"deployments were not ready after {timeout_seconds:.0f} s "
                f"({describe_progress(rows)}); see the replica logs in "
                "/tmp/ray/session_latest/logs/serve"
            )
        worker.join(timeout=1.0)
    on_progress(_progress(config.app_name))
    if failure:
        raise ClusterError(f"deploying {config.app_name} failed: {failure[0]}")


def wait_router_ready(url: str, timeout_seconds: float) -> None:
    """Poll the router's GET /ready until it answers 200 (every pool has a replica and the
    router can place requests); ClusterError with its last answer after `timeout_seconds`."""
    import httpx

    deadline = time.monotonic() + timeout_seconds
    last = "no answer"
    while True:
        try:
            resp = httpx.get(f"{url}/ready", timeout=5.0)
            if resp.status_code == 200:
                return
            last = f"HTTP {resp.status_code}: {resp.text[:300]}"
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            raise ClusterError(f"the router was not ready after {timeout_seconds:.0f} s ({last})")
        time.sleep(0.5)


def describe_progress(rows: Sequence[DeploymentProgress]) -> str:
    """One line naming each deployment's state, e.g. `Decode: UPDATING 0/1 (...)`."""
    if not rows:
        return "no deployment reported yet"
    return "; ".join(
        f"{r.name}: {r.status} {r.num_running}/{r.num_target}"
        + (f" ({r.message[:200]})" if r.message else "")
        for r in rows
    )


def _progress(app_name: str) -> list[DeploymentProgress]:
    from ray import serve

    try:
        status = serve.status()
    except Exception:  # the controller is still starting
        return []
    app = status.applications.get(app_name)
    if app is None:
        return []
    rows = []
    for name, dep in app.deployments.items():
        counts = dep.replica_states or {}
        rows.append(
            DeploymentProgress(
                name=name,
                status=str(getattr(dep.status, "value", dep.status)),
                num_running=int(counts.get("RUNNING", 0)),
                num_target=int(sum(counts.values())),
                message=(dep.message or "").strip().splitlines()[0] if dep.message else "",
            )
        )
    return rows


def write_state(started_ray: bool, shm_before: set[str], config: PdserveConfig) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    _state_file().write_text(
        json.dumps(
            {
                "started_ray": started_ray,
                "app_name": config.app_name,
                "url": f"http://{config.router.host}:{config.router.port}",
                "shm_before": sorted(shm_before),
                "pid": os.getpid(),
            }
        )
    )


def down(log: Callable[[str], None]) -> None:
    """Stop what `up` started: the Serve app, the Ray head (if pdserve started it), leftovers."""
    state_path = _state_file()
    state = json.loads(state_path.read_text()) if state_path.exists() else None
    if state is None:
        log("no pdserve cluster recorded as running; cleaning up leftovers only")
    reachable = _ray_reachable()
    if reachable:
        with contextlib.suppress(Exception):
            import ray
            from ray import serve

            ray.init(address=f"127.0.0.1:{RAY_PORT}", logging_level="ERROR", log_to_driver=False)
            log("stopping Serve application and engines")
            serve.shutdown()
            ray.shutdown()
    if reachable and (state is None or state.get("started_ray")):
        log("stopping Ray")
        _stop_own_ray(log)
    _kill_orphan_engines(log)
    keep = set(state.get("shm_before", [])) if state else set()
    removed = _clean_shm(keep)
    if removed:
        log(f"removed {removed} stale shared-memory buffers from /dev/shm")
    with contextlib.suppress(FileNotFoundError):
        state_path.unlink()
    left = leftovers(RAY_PORT, keep)
    if left:
        log("[yellow]still there after stopping:[/yellow] " + "; ".join(left))


def leftovers(ray_port: int, shm_before: set[str], ports: Iterable[int] = ()) -> list[str]:
    """What a stopped cluster left behind: its Ray processes, its engine processes, vLLM/Ray
    /dev/shm buffers no live process uses that were not there before (`shm_before`), and any
    of `ports` (e.g. the router's) still listening. Empty when `down` did its job."""
    listening = {c.laddr.port for c in psutil.net_connections("tcp") if c.status == "LISTEN"}
    found = [f"port {port} still listening" for port in ports if port in listening]
    found += [f"Ray process {p.pid}" for p in _own_ray_processes(ray_port) if _alive(p)]
    found += [f"engine process {p.pid}" for p in _own_engines(ray_port) if _alive(p)]
    found += [
        f"shared memory {path}" for path in stale_shm(_shm_snapshot(), shm_before, _shm_in_use())
    ]
    return found


def is_own_ray_process(cmdline: Sequence[str], ray_port: int) -> bool:
    """True for a Ray system process of the cluster whose GCS listens on `ray_port`: its
    command line names the port (`--gcs-address=HOST:PORT`, `--address=HOST:PORT` or
    `--gcs_server_port=PORT`). `ray stop` would stop every Ray cluster on the machine."""
    suffix = f":{ray_port}"
    return f"--gcs_server_port={ray_port}" in cmdline or any(
        a.startswith(("--gcs-address=", "--address=")) and a.endswith(suffix) for a in cmdline
    )


def is_own_engine(environ: Mapping[str, str], ray_port: int) -> bool:
    """True for a process started by an engine server of the cluster on `ray_port`: pdserve
    marks them with PDSERVE_ENGINE_ROLE and PDSERVE_GCS_ADDRESS (other clusters' are left)."""
    return "PDSERVE_ENGINE_ROLE" in environ and environ.get("PDSERVE_GCS_ADDRESS", "").endswith(
        f":{ray_port}"
    )


def stale_shm(entries: Iterable[str], keep: set[str], in_use: set[str]) -> list[str]:
    """The /dev/shm paths to remove: not in `keep` (there before `up`), used by no live process,
    and named like vLLM's or Ray's buffers (another program's are never touched)."""
    return sorted(
        path
        for path in set(entries) - keep - in_use
        if os.path.basename(path).startswith(("psm_", "vllm", "ray", "plasma"))
        or "sem." in os.path.basename(path)
    )


def _others(attrs: list[str]) -> Iterator[psutil.Process]:
    """Every live process but this one, with `attrs` in `.info` (None where unreadable)."""
    me = os.getpid()
    return (p for p in psutil.process_iter(attrs, ad_value=None) if p.pid != me)


def _own_ray_processes(ray_port: int) -> list[psutil.Process]:
    """This cluster's Ray processes and all their descendants: the raylet's agents (dashboard
    agent, runtime-env agent) rename their process title and lose the port from their command
    line, and workers are the raylet's children."""
    found: dict[int, psutil.Process] = {}
    for proc in _others(["cmdline"]):
        if is_own_ray_process(proc.info["cmdline"] or (), ray_port):
            found[proc.pid] = proc
            with contextlib.suppress(psutil.Error):
                found.update((c.pid, c) for c in proc.children(recursive=True))
    return list(found.values())


def _own_engines(ray_port: int) -> list[psutil.Process]:
    return [p for p in _others(["environ"]) if is_own_engine(p.info["environ"] or {}, ray_port)]


def _stop_own_ray(log: Callable[[str], None], grace_s: float = 10.0) -> None:
    """SIGTERM this cluster's Ray processes, SIGKILL what is left after `grace_s`; Ray's
    worker processes exit with their raylet."""
    procs = _own_ray_processes(RAY_PORT)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(map(_alive, procs)):
        time.sleep(0.2)
    for proc in filter(_alive, procs):
        with contextlib.suppress(psutil.Error):
            proc.kill()
    log(f"stopped {len(procs)} Ray processes of this cluster (port {RAY_PORT})")


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (an exited process whose parent has not reaped it yet)."""
    with contextlib.suppress(psutil.Error):
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    return False


def _kill_orphan_engines(log: Callable[[str], None]) -> None:
    """Engine processes whose Ray actor died without stopping them."""
    procs = _own_engines(RAY_PORT)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if procs:
        log(f"stopped {len(procs)} leftover engine processes")


def _shm_in_use() -> set[str]:
    """/dev/shm paths some live process still maps or holds open."""
    used: set[str] = set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            used.update(m.path for m in proc.memory_maps() if m.path.startswith("/dev/shm/"))
        with contextlib.suppress(psutil.Error):
            used.update(f.path for f in proc.open_files() if f.path.startswith("/dev/shm/"))
    return used


def _clean_shm(keep: set[str]) -> int:
    """Remove vLLM/Ray shared-memory leftovers (`stale_shm`); returns how many."""
    removed = 0
    for path in stale_shm(_shm_snapshot(), keep, _shm_in_use()):
        with contextlib.suppress(OSError):
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed += 1
    return removed


def shm_snapshot() -> set[str]:
    """The current /dev/shm entries (taken before start-up, to know what to clean)."""
    return _shm_snapshot()
