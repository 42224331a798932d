"""Operator views of the cluster for the router's /ready and /v1/pdserve/replicas endpoints.

`ClusterStatus` is built once per router replica and called per operator request; it reads
the router's replica view (no calls to the replicas) and, until that view is attached, pings
the pools through the dispatcher.
"""

from __future__ import annotations

from typing import Any

from pdserve.router.dispatch import Dispatcher
from pdserve.router.placement import Placer
from pdserve.router.policy.types import PoolName

_POOLS: tuple[PoolName, ...] = ("prefill", "decode")


class ClusterStatus:
    """Readiness and the replica picture, from the placer's replica view."""

    def __init__(self, placer: Placer | None, dispatcher: Dispatcher, ping_timeout_s: float = 5):
        self._placer = placer
        self._dispatcher = dispatcher
        self._ping_timeout_s = ping_timeout_s

    async def pools_ready(self) -> dict[str, bool]:
        """Whether each pool has a running replica: from Ray Serve's own replica list once
        both pools' request routers are attached, else by pinging each pool."""
        if self._placer is not None:
            view = self._placer.view
            view.refresh()
            if view.attached:
                return {pool: bool(view.snapshots(pool)) for pool in _POOLS}
        return await self._dispatcher.pools_ready(timeout_seconds=self._ping_timeout_s)

    def replicas(self) -> dict[str, Any]:
        """The router's view of the replicas (for operators and `pdserve top`)."""
        if self._placer is None:
            return {"ready": False, "pools": {}}
        return self._placer.view.describe()
