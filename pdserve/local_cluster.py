"""Start and stop pdserve on this machine: the Ray node (a single-machine cluster, the head of a
multi-node one, or a worker joining a head) and, on the head, the Serve app.

Used by `pdserve up` / `pdserve join` / `pdserve down`. Each node records what it started in a
state file so that `down` stops exactly that node (and cleans the shared-memory buffers
engines leave in /dev/shm).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pdserve import cluster_procs, ray_node
from pdserve.cluster_procs import Scope
from pdserve.config import PdserveConfig
from pdserve.node import NodeSpec, node_resources, unplaceable_pools
from pdserve.serve_env import PROXY_PORT_OFFSET, lean_serve_env

STATE_DIR = pathlib.Path(os.environ.get("PDSERVE_STATE_DIR", "~/.cache/pdserve/run")).expanduser()
RAY_PORT = int(os.environ.get("PDSERVE_RAY_PORT", "6390"))
# Ray's Prometheus export: the engines' own vllm: metrics (and Ray/Serve metrics) of this node.
RAY_METRICS_PORT = int(os.environ.get("PDSERVE_RAY_METRICS_PORT", "8081"))
# Ray Serve's lean path (pdserve/serve_env.py): throughput-optimized mode with direct ingress
# (the Router replica itself serves HTTP on router.port; the proxy moves to router.port +
# PROXY_PORT_OFFSET), a 0.5 s control loop, warnings logged at once. Several router replicas
# (router.num_replicas > 1 or router.autoscaling) keep HTTP on the proxy at router.port:
# direct ingress would give each replica a port of its own (router.port, +1, ...), not one URL.
# PDSERVE_LEAN_SERVE=0 falls back to Ray Serve's defaults (HTTP through the proxy actor).
LEAN_SERVE = os.environ.get("PDSERVE_LEAN_SERVE", "1") == "1"
# PDSERVE_DIRECT_INGRESS=0 keeps the rest of the lean path but serves HTTP through Serve's proxy
# on router.port: the Helm chart's settings, for measuring what direct ingress buys.
DIRECT_INGRESS = os.environ.get("PDSERVE_DIRECT_INGRESS", "1") == "1"


def _serve_env(config: PdserveConfig) -> dict[str, str]:
    """Ray Serve settings the controller and replicas read from the environment."""
    if not LEAN_SERVE:
        return {}
    return lean_serve_env(config.router.port if _direct_ingress(config) else None)


def _direct_ingress(config: PdserveConfig) -> bool:
    """The router replica serves HTTP itself on router.port (one router, lean path on)."""
    return LEAN_SERVE and DIRECT_INGRESS and not config.router.several_replicas


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


@dataclass(frozen=True)
class StartedNode:
    """The node `up` or `join` brought up (or found already running)."""

    spec: NodeSpec
    address: str
    """The address other nodes and clients reach this node on."""
    gcs_address: str
    """HOST:PORT of the cluster's Ray head (to join it, or to connect a driver)."""
    started_ray: bool
    resources: dict[str, float]


def _state_file() -> pathlib.Path:
    return STATE_DIR / "state.json"


def start_node(
    config: PdserveConfig, spec: NodeSpec, head_address: str | None = None
) -> StartedNode:
    """Start this machine's Ray node: a head (single or multi-node) on RAY_PORT, or, with
    `head_address`, a worker that joins it. A head already answering on RAY_PORT is reused."""
    address = ray_node.detect_address(spec, head_address)
    resources = node_resources(config, spec.pools)
    gcs = head_address or f"{address}:{RAY_PORT}"
    if head_address is None and ray_node.reachable(gcs):
        return StartedNode(spec, address, gcs, False, resources)
    ray_port = int(gcs.rsplit(":", 1)[1])
    serve_env = _serve_env(config)
    try:
        ray_node.start_node(
            spec, address, resources, ray_port, RAY_METRICS_PORT, serve_env, head_address
        )
    except ray_node.NodeStartError as exc:
        raise ClusterError(str(exc)) from exc
    return StartedNode(spec, address, gcs, True, resources)


def deploy(
    config: PdserveConfig,
    gcs_address: str,
    on_progress: Callable[[list[DeploymentProgress]], None],
    timeout_seconds: float = 900.0,
) -> None:
    """Deploy the Serve app on the cluster whose head is `gcs_address` and wait until every
    deployment is healthy.

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
    ray.init(address=gcs_address, logging_level="ERROR", log_to_driver=False)
    proxy_port = config.router.port + (PROXY_PORT_OFFSET if _direct_ingress(config) else 0)
    # One proxy, on the head with the routers (one router serves HTTP itself with direct
    # ingress; several are reached through this proxy on router.port).
    serve.start(
        proxy_location="HeadOnly",
        http_options={"host": config.router.host, "port": proxy_port},
    )
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
    rows = _progress(config.app_name)
    on_progress(rows)
    if failure:
        raise ClusterError(
            f"deploying {config.app_name} failed: {failure[0]} ({describe_progress(rows)})"
        )


def unplaceable(config: PdserveConfig, gcs_address: str) -> list[str]:
    """What the cluster's nodes lack for the config's pools (a Ray resource, GPUs), one line
    per pool (see pdserve.node.unplaceable_pools); empty when every pool can place."""
    import ray

    ray.init(address=gcs_address, logging_level="ERROR", log_to_driver=False)
    try:
        return unplaceable_pools(config, ray.cluster_resources())
    finally:
        ray.shutdown()


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
        + (f" ({r.message[:400]})" if r.message else "")
        for r in rows
    )


def summarize_status_message(message: str) -> str:
    """One line for a deployment's Serve status message. Serve's message for a replica that
    failed to start is a sentence ending in "Error:" followed by the traceback; the line kept
    is the exception (the traceback's last line, e.g. the engine's start deadline) and then
    that sentence, so a cut line still names the cause."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0]
    if first.endswith("Error:") and len(lines) > 1:
        return f"{lines[-1]} ({first.removesuffix('Error:').strip()})"
    return first


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
                message=summarize_status_message(dep.message or ""),
            )
        )
    return rows


def write_state(node: StartedNode, shm_before: set[str], config: PdserveConfig) -> None:
    """Record what this node started, for `down`."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    state = {
        "kind": node.spec.kind,
        "address": node.address,
        "gcs_address": node.gcs_address,
        "started_ray": node.started_ray,
        "app_name": config.app_name,
        "url": f"http://{config.router.host}:{config.router.port}",
        "shm_before": sorted(shm_before),
        "pid": os.getpid(),
    }
    _state_file().write_text(json.dumps(state))


def _scope(state: dict[str, Any] | None) -> Scope:
    """Whose processes `down` stops: a single-machine cluster (or an unrecorded one) on
    RAY_PORT whole; a node of a multi-node cluster only its own."""
    if state is None or state.get("kind", "single") == "single":
        return Scope(RAY_PORT)
    port = int(str(state["gcs_address"]).rsplit(":", 1)[1])
    return Scope(port, str(state["address"]), is_head=state["kind"] == "head")


def down(log: Callable[[str], None]) -> None:
    """Stop what `up` or `join` started on this machine. On a head (or a single-machine
    cluster): the Serve app with every engine, then its Ray processes. On a joined node: only
    that node's Ray processes and engines (the cluster carries on without it). Then leftover
    engine processes and /dev/shm buffers."""
    state_path = _state_file()
    state = json.loads(state_path.read_text()) if state_path.exists() else None
    if state is None:
        log("no pdserve node recorded as running here; cleaning up leftovers only")
    scope = _scope(state)
    gcs = str(state["gcs_address"]) if state else f"127.0.0.1:{RAY_PORT}"
    is_worker = state is not None and state.get("kind") == "worker"
    reachable = ray_node.reachable(gcs)
    if reachable and not is_worker:
        with contextlib.suppress(Exception):
            import ray
            from ray import serve

            ray.init(
                address=gcs, logging_level="ERROR", log_to_driver=False, ignore_reinit_error=True
            )
            log("stopping Serve application and engines")
            serve.shutdown()
            ray.shutdown()
    if state.get("started_ray") if state else reachable:
        log("stopping Ray" + (" on this node" if is_worker else ""))
        cluster_procs.stop_ray(scope, log)
    cluster_procs.kill_orphan_engines(scope, log)
    keep = set(state.get("shm_before", [])) if state else set()
    removed = cluster_procs.clean_shm(keep)
    if removed:
        log(f"removed {removed} stale shared-memory buffers from /dev/shm")
    with contextlib.suppress(FileNotFoundError):
        state_path.unlink()
    left = cluster_procs.leftovers(scope, keep)
    if left:
        log("[yellow]still there after stopping:[/yellow] " + "; ".join(left))


def shm_snapshot() -> set[str]:
    """The current /dev/shm entries (taken before start-up, to know what to clean)."""
    return cluster_procs.shm_snapshot()
