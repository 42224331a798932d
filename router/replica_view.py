"""The router's view of every prefill and decode replica: load snapshots and cached prefixes.

Owned by the Router replica. The pool's Ray Serve request routers attach themselves here
(`attach`); `refresh()` (called before each routing decision, cheap) turns their routing stats
into policy `ReplicaSnapshot`s and keeps one KV-event subscriber per replica that publishes
events, feeding the shared `PrefixIndex`.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from pdserve.names import POOLS, PoolName
from pdserve.router.kv_events import KVEventSubscriber
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.policy.types import ReplicaSnapshot


class ReplicaSource(Protocol):
    """A pool's request router: lists (replica id, routing stats)."""

    def replicas(self) -> list[tuple[str, dict[str, Any]]]: ...


class ReplicaView:
    """Snapshots and prefix index for both pools. Not thread-safe; used on the router's loop."""

    def __init__(
        self,
        index: PrefixIndex,
        refresh_interval_s: float = 0.05,
        pools: tuple[PoolName, ...] = POOLS,
    ):
        """`pools`: the pools the deployment runs (only decode when it is aggregated)."""
        self.index = index
        self.pools = pools
        self._last_stats: dict[str, dict[str, Any]] = {}  # replica id -> its last report
        self._sources: dict[PoolName, ReplicaSource] = {}
        self._snapshots: dict[PoolName, list[ReplicaSnapshot]] = {"prefill": [], "decode": []}
        self._healthy: dict[PoolName, int] = {"prefill": 0, "decode": 0}
        self._subscribers: dict[str, KVEventSubscriber] = {}
        self._capacity: dict[str, int] = {}  # replica id -> KV blocks given to the index
        self._block_size = 0
        self._refreshed_at = 0.0
        self._refresh_interval_s = refresh_interval_s

    def attach(self, pool: PoolName, source: ReplicaSource) -> None:
        self._sources[pool] = source
        self._refreshed_at = 0.0

    @property
    def attached(self) -> bool:
        """Every pool's request router has attached."""
        return all(pool in self._sources for pool in self.pools)

    @property
    def ready(self) -> bool:
        """True once every pool is attached and has replicas with a known block size."""
        return all(self._snapshots[pool] for pool in self.pools) and bool(self._block_size)

    def emptied_pool(self) -> PoolName | None:
        """A pool without replicas although the view has been ready before (it knows the
        engines' block size): its replicas died or are being replaced. None otherwise."""
        if not (self.attached and self._block_size):
            return None
        return next((pool for pool in self.pools if not self._snapshots[pool]), None)

    @property
    def block_size_tokens(self) -> int:
        return self._block_size

    def snapshots(self, pool: PoolName) -> list[ReplicaSnapshot]:
        return self._snapshots[pool]

    def healthy_count(self, pool: PoolName) -> int:
        """Healthy replicas of `pool` at the last refresh."""
        return self._healthy[pool]

    def reports(self, pool: PoolName) -> list[tuple[str, dict[str, Any]]]:
        """(replica id, its last routing stats) of each healthy replica of `pool`."""
        return [
            (s.replica_id, self._last_stats[s.replica_id])
            for s in self._snapshots.get(pool, [])
            if s.healthy and s.replica_id in self._last_stats
        ]

    def describe(self) -> dict[str, Any]:
        """A JSON-able picture of the view (GET /v1/pdserve/replicas)."""
        self.refresh()
        return {
            "attached_pools": sorted(self._sources),
            "ready": self.ready,
            "block_size_tokens": self._block_size,
            "prefix_index_mode": self.index.mode,
            "pools": {
                pool: [
                    {
                        "replica_id": s.replica_id,
                        "healthy": s.healthy,
                        "running": s.num_running_requests,
                        "waiting": s.num_waiting_requests,
                        "queued_prefill_tokens": s.queued_prefill_tokens,
                        "queued_prefills": s.num_queued_prefills,
                        "kv_cache_usage": round(s.kv_cache_usage, 4),
                        "cached_blocks": self.index.num_tracked_blocks(s.replica_id),
                        "kv_events": s.replica_id in self._subscribers,
                    }
                    for s in snaps
                ]
                for pool, snaps in self._snapshots.items()
            },
        }

    def refresh(self, now_s: float | None = None) -> None:
        """Rebuild snapshots from the latest routing stats (at most every refresh_interval_s)."""
        now = time.monotonic() if now_s is None else now_s
        if now - self._refreshed_at < self._refresh_interval_s:
            return
        self._refreshed_at = now
        alive: set[str] = set()
        for pool, source in self._sources.items():
            snaps = []
            for replica_id, reported in source.replicas():
                alive.add(replica_id)
                stats = self._usable_stats(replica_id, reported)
                snaps.append(
                    ReplicaSnapshot(
                        replica_id=replica_id,
                        pool=pool,
                        num_running_requests=int(stats.get("num_running_requests", 0)),
                        num_waiting_requests=int(stats.get("num_waiting_requests", 0)),
                        kv_cache_usage=min(1.0, max(0.0, float(stats.get("kv_cache_usage", 0.0)))),
                        queued_prefill_tokens=int(stats.get("queued_prefill_tokens", 0)),
                        num_queued_prefills=int(stats.get("num_queued_prefills", 0)),
                        healthy=bool(stats),
                        kv_transfer_failures_total=int(stats.get("kv_transfer_failures_total", 0)),
                        kv_expired_total=int(stats.get("kv_expired_total", 0)),
                    )
                )
                if stats:
                    self._track(replica_id, stats)
                else:  # dead or frozen engine: its cached blocks are no reason to route there
                    self._forget(replica_id)
            self._snapshots[pool] = snaps
            self._healthy[pool] = sum(1 for s in snaps if s.healthy)
        for gone in (set(self._subscribers) | set(self._last_stats)) - alive:
            self._forget(gone)
            self._last_stats.pop(gone, None)

    def _usable_stats(self, replica_id: str, reported: dict[str, Any]) -> dict[str, Any]:
        """The replica's stats to route on; {} when it is unhealthy.

        Unhealthy: it says so (`healthy: false`: its engine is dead or unresponsive) or it
        never reported. An empty report is no news (Ray Serve has not polled this replica
        yet, e.g. right after it rebuilt its replica list): the last stats stand. (A replica
        whose actor itself is stuck is failed by Ray Serve's own health check.)"""
        if reported:
            self._last_stats[replica_id] = dict(reported)
        else:
            reported = self._last_stats.get(replica_id, {})
        if not reported.get("healthy", True):
            return {}
        return reported

    def _track(self, replica_id: str, stats: dict[str, Any]) -> None:
        if stats.get("block_size_tokens"):
            self._block_size = int(stats["block_size_tokens"])
        capacity = int(stats.get("num_kv_blocks") or 0)
        if capacity and self._capacity.get(replica_id) != capacity:
            self.index.set_capacity(replica_id, capacity)
            self._capacity[replica_id] = capacity
        endpoint = stats.get("kv_events_endpoint")
        if endpoint and self.index.mode == "events" and replica_id not in self._subscribers:
            sub = KVEventSubscriber(replica_id, endpoint, self.index)
            sub.start()
            self._subscribers[replica_id] = sub

    def _forget(self, replica_id: str) -> None:
        """Drop a replica's KV-event subscription and cached blocks (idempotent, cheap when
        already forgotten)."""
        sub = self._subscribers.pop(replica_id, None)
        if sub is not None:
            import asyncio

            asyncio.get_running_loop().create_task(sub.close())
        self.index.forget_replica(replica_id)
        self._capacity.pop(replica_id, None)

    async def close(self) -> None:
        for sub in self._subscribers.values():
            await sub.close()
        self._subscribers.clear()
