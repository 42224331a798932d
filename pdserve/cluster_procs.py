"""Find and stop one pdserve node's processes, and the /dev/shm buffers they leave.

`pdserve down` must stop exactly its own node: not another cluster on the same machine (told
apart by the Ray port), and not another node of the same cluster sharing the machine (told
apart by the node's address, e.g. two nodes in two network namespaces). `Scope` names what
is ours; the `is_own_*` rules are pure and table-tested.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import psutil

from pdserve.node import NODE_ADDRESS_ENV

_NODE_IP_FLAGS = ("--node-ip-address=", "--node_ip_address=")


@dataclass(frozen=True)
class Scope:
    """The processes one `down` may stop: the cluster whose GCS listens on `ray_port`, and,
    with `node_address`, only that node's (`is_head`: also the head's processes that name no
    node, e.g. Ray's autoscaler monitor). `node_address` None: every node on this machine."""

    ray_port: int
    node_address: str | None = None
    is_head: bool = True


def named_node(cmdline: Sequence[str]) -> str | None:
    """The node address a Ray process's command line names, if any."""
    for arg in cmdline:
        for flag in _NODE_IP_FLAGS:
            if arg.startswith(flag):
                return arg[len(flag) :]
    return None


def is_own_ray_process(cmdline: Sequence[str], scope: Scope) -> bool:
    """True for a Ray system process of `scope`: its command line names the cluster's GCS
    port (`--gcs-address=HOST:PORT`, `--address=HOST:PORT` or `--gcs_server_port=PORT`) and,
    when the scope is one node, that node's address (or none, on the head). `ray stop` would
    stop every Ray cluster on the machine."""
    port = scope.ray_port
    suffix = f":{port}"
    in_cluster = f"--gcs_server_port={port}" in cmdline or any(
        a.startswith(("--gcs-address=", "--address=")) and a.endswith(suffix) for a in cmdline
    )
    if not in_cluster or scope.node_address is None:
        return in_cluster
    node = named_node(cmdline)
    return node == scope.node_address if node is not None else scope.is_head


def is_own_engine(environ: Mapping[str, str], scope: Scope) -> bool:
    """True for a process started by an engine server of `scope`: pdserve marks them with
    PDSERVE_ENGINE_ROLE and PDSERVE_GCS_ADDRESS, and each node's processes inherit its
    PDSERVE_NODE_ADDRESS (other clusters' and other nodes' are left)."""
    in_cluster = "PDSERVE_ENGINE_ROLE" in environ and environ.get(
        "PDSERVE_GCS_ADDRESS", ""
    ).endswith(f":{scope.ray_port}")
    if not in_cluster or scope.node_address is None:
        return in_cluster
    return environ.get(NODE_ADDRESS_ENV) == scope.node_address


def stale_shm(entries: Iterable[str], keep: set[str], in_use: set[str]) -> list[str]:
    """The /dev/shm paths to remove: not in `keep` (there before `up`), used by no live process,
    and named like vLLM's or Ray's buffers (another program's are never touched)."""
    return sorted(
        path
        for path in set(entries) - keep - in_use
        if os.path.basename(path).startswith(("psm_", "vllm", "ray", "plasma"))
        or "sem." in os.path.basename(path)
    )


def shm_snapshot() -> set[str]:
    """The current /dev/shm entries (taken before start-up, to know what to clean)."""
    return set(glob.glob("/dev/shm/*"))


def leftovers(scope: Scope, shm_before: set[str], ports: Iterable[int] = ()) -> list[str]:
    """What a stopped node left behind: its Ray processes, its engine processes, vLLM/Ray
    /dev/shm buffers no live process uses that were not there before (`shm_before`), and any
    of `ports` (e.g. the router's) still listening. Empty when `down` did its job."""
    listening = {c.laddr.port for c in psutil.net_connections("tcp") if c.status == "LISTEN"}
    found = [f"port {port} still listening" for port in ports if port in listening]
    found += [f"Ray process {p.pid}" for p in own_ray_processes(scope) if _alive(p)]
    found += [f"engine process {p.pid}" for p in own_engines(scope) if _alive(p)]
    found += [f"shared memory {path}" for path in stale_shm(shm_snapshot(), shm_before, _in_use())]
    return found


def _others(attrs: list[str]) -> Iterator[psutil.Process]:
    """Every live process but this one, with `attrs` in `.info` (None where unreadable)."""
    me = os.getpid()
    return (p for p in psutil.process_iter(attrs, ad_value=None) if p.pid != me)


def own_ray_processes(scope: Scope) -> list[psutil.Process]:
    """The scope's Ray processes and all their descendants: the raylet's agents (dashboard
    agent, runtime-env agent) rename their process title and lose the port from their command
    line, and workers are the raylet's children."""
    found: dict[int, psutil.Process] = {}
    for proc in _others(["cmdline"]):
        if is_own_ray_process(proc.info["cmdline"] or (), scope):
            found[proc.pid] = proc
            with contextlib.suppress(psutil.Error):
                found.update((c.pid, c) for c in proc.children(recursive=True))
    return list(found.values())


def own_engines(scope: Scope) -> list[psutil.Process]:
    return [p for p in _others(["environ"]) if is_own_engine(p.info["environ"] or {}, scope)]


@dataclass(frozen=True)
class MarkedProcess:
    """A process carrying pdserve's engine markers (see `is_own_engine`)."""

    pid: int
    ppid: int
    cmdline: tuple[str, ...]


@dataclass(frozen=True)
class EngineTree:
    """One vLLM engine's processes: its EngineCore (the scheduler) and its workers."""

    core: int
    workers: tuple[int, ...]


def engine_trees(marked: Iterable[MarkedProcess]) -> list[EngineTree]:
    """Group one pool's marked processes into engines by the process tree: an EngineCore is a
    marked process whose parent is not marked (the replica, which set the markers after it
    started), its workers are its marked children; multiprocessing's resource tracker, the
    replica's other child, is no engine. Not by vLLM's process titles (`VLLM::EngineCore`):
    vLLM sets them with setproctitle, and under Ray's replicas they do not always take (seen:
    every engine of a CI cluster named `python`)."""
    procs = {
        m.pid: m
        for m in marked
        if not any("multiprocessing.resource_tracker" in a for a in m.cmdline)
    }
    return [
        EngineTree(pid, tuple(sorted(c.pid for c in procs.values() if c.ppid == pid)))
        for pid, m in sorted(procs.items())
        if m.ppid not in procs
    ]


def pool_engines(scope: Scope, role: str) -> list[tuple[psutil.Process, list[psutil.Process]]]:
    """The scope's `role` engines on this machine: (EngineCore, its workers) each."""
    found = {
        p.pid: p
        for p in _others(["environ", "ppid", "cmdline"])
        if (env := p.info["environ"] or {}).get("PDSERVE_ENGINE_ROLE") == role
        and is_own_engine(env, scope)
    }
    marked = [
        MarkedProcess(p.pid, p.info["ppid"] or 0, tuple(p.info["cmdline"] or ()))
        for p in found.values()
    ]
    return [(found[t.core], [found[w] for w in t.workers]) for t in engine_trees(marked)]


RAY_STOP_GRACE_S = 3.0
"""How long `stop_ray` lets Ray's daemons exit on SIGTERM. By then `pdserve down` has stopped
the Serve app and its engines; the GCS server, raylet, dashboard and runtime-env agent hold
nothing of the deployment's, and on SIGTERM they take about 10 s to exit on their own."""


def stop_ray(scope: Scope, log: Callable[[str], None], grace_s: float = RAY_STOP_GRACE_S) -> None:
    """SIGTERM the scope's Ray processes, SIGKILL what is left after `grace_s`; Ray's worker
    processes exit with their raylet."""
    procs = own_ray_processes(scope)
    terminate_then_kill(procs, grace_s)
    where = f", node {scope.node_address}" if scope.node_address else ""
    log(f"stopped {len(procs)} Ray processes of this cluster (port {scope.ray_port}{where})")


def terminate_then_kill(procs: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM `procs`, then SIGKILL those still running after `grace_s` (a zombie counts as
    gone; psutil refuses to signal a pid that a new process reused)."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(map(_alive, procs)):
        time.sleep(0.2)
    for proc in filter(_alive, procs):
        with contextlib.suppress(psutil.Error):
            proc.kill()


def kill_orphan_engines(scope: Scope, log: Callable[[str], None]) -> None:
    """Engine processes whose Ray actor died without stopping them."""
    procs = own_engines(scope)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if procs:
        log(f"stopped {len(procs)} leftover engine processes")


def clean_shm(keep: set[str]) -> int:
    """Remove vLLM/Ray shared-memory leftovers (`stale_shm`); returns how many."""
    removed = 0
    for path in stale_shm(shm_snapshot(), keep, _in_use()):
        with contextlib.suppress(OSError):
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed += 1
    return removed


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (an exited process whose parent has not reaped it yet)."""
    with contextlib.suppress(psutil.Error):
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    return False


def _in_use() -> set[str]:
    """/dev/shm paths some live process still maps or holds open."""
    used: set[str] = set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            used.update(m.path for m in proc.memory_maps() if m.path.startswith("/dev/shm/"))
        with contextlib.suppress(psutil.Error):
            used.update(f.path for f in proc.open_files() if f.path.startswith("/dev/shm/"))
    return used
