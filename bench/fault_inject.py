"""Faults in real engine processes of a local cluster, and watching the router recover.

Engine processes are found the way `pdserve down` finds them: pdserve marks each with
PDSERVE_ENGINE_ROLE and the cluster's GCS address (`cluster_procs.is_own_engine`); the
engine-core process (vLLM's EngineCore) is the marked one whose parent, the replica, is not
(`cluster_procs.engine_trees`). Only a cluster on this machine can be faulted.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from typing import Any

import httpx
import psutil

from pdserve.cluster_procs import Scope, pool_engines
from pdserve.names import PoolName


class FaultError(RuntimeError):
    """The fault cannot be injected or observed (no such engine, router unreachable)."""


def engine_cores(ray_port: int, role: PoolName) -> list[psutil.Process]:
    """The running engine-core processes of one pool of the cluster on `ray_port`."""
    found = [core for core, _ in pool_engines(Scope(ray_port), role)]
    if not found:
        raise FaultError(f"no {role} engine process of the cluster on Ray port {ray_port} here")
    return found


def signal_engine(proc: psutil.Process, sig: signal.Signals) -> None:
    """Send `sig` to an engine process (SIGKILL: crash, SIGSTOP: hang, SIGCONT: resume)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        proc.send_signal(sig)


async def replicas(http: httpx.AsyncClient, pool: PoolName) -> list[dict[str, Any]]:
    """The router's view of one pool (GET /v1/pdserve/replicas)."""
    resp = await http.get("/v1/pdserve/replicas")
    if resp.status_code != 200:
        raise FaultError(f"GET /v1/pdserve/replicas answered {resp.status_code}: {resp.text}")
    view: list[dict[str, Any]] = resp.json()["pools"][pool]
    return view


async def healthy_ids(http: httpx.AsyncClient, pool: PoolName) -> set[str]:
    return {r["replica_id"] for r in await replicas(http, pool) if r["healthy"]}


async def wait_replaced(
    http: httpx.AsyncClient,
    pool: PoolName,
    before: set[str],
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> float | None:
    """Wait until `pool` has as many healthy replicas as `before` again, one of them new (the
    replacement); return that moment on `clock`, or None after `timeout_s`."""
    deadline = clock() + timeout_s
    while clock() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            now = await healthy_ids(http, pool)
            if len(now) >= len(before) and now - before:
                return clock()
        await asyncio.sleep(1.0)
    return None


async def kv_usage(http: httpx.AsyncClient, pool: PoolName) -> float:
    """The pool's summed KV-cache usage (fractions of each engine's blocks in use)."""
    return sum(float(r["kv_cache_usage"]) for r in await replicas(http, pool))
