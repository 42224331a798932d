"""Operator views of the cluster for the router's /ready and /v1/pdserve/replicas endpoints.

`ClusterStatus` is built once per router replica and called per operator request; it reads
the router's replica view (no calls to the replicas) and, until that view is attached, pings
the pools through the dispatcher.
"""

from __future__ import annotations

from typing import Any

from pdserve.router.dispatch import Dispatcher
from pdserve.router.placement import Placer
from pdserve.router.scaling import ScalingView


class ClusterStatus:
    """Readiness and the replica picture, from the placer's replica view."""

    def __init__(
        self,
        placer: Placer | None,
        dispatcher: Dispatcher,
        scaling: ScalingView | None = None,
        ping_timeout_s: float = 5,
    ):
        self._placer = placer
        self.scaling = scaling
        self._dispatcher = dispatcher
        self._ping_timeout_s = ping_timeout_s

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, body) for GET /ready: every pool has a running replica and, with a placer,
        the router can place requests (both pools' request routers attached; until then
        requests are placed by load alone).

        Once both request routers are attached a pool counts when one of Ray Serve's replicas
        reports routing stats (a replica that stopped reporting is not routed to);
        before that each pool is pinged through the dispatcher, which also makes Ray Serve
        create (attach) the request routers in this process."""
        if self._placer is None:
            pools = await self._dispatcher.pools_ready(timeout_seconds=self._ping_timeout_s)
            return all(pools.values()), {"pools": pools}
        view = self._placer.view
        view.refresh()
        if not view.attached:
            pools = await self._dispatcher.pools_ready(timeout_seconds=self._ping_timeout_s)
            view.refresh()
        if view.attached:
            pools = {pool: any(s.healthy for s in view.snapshots(pool)) for pool in view.pools}
        placement = view.ready
        return all(pools.values()) and placement, {"pools": pools, "placement": placement}

    async def replicas(self) -> dict[str, Any]:
        """The router's view of the replicas (for operators and `pdserve top`), and under
        `scaling` each elastic pool's autoscaler state and recent scale events."""
        doc = (
            {"ready": False, "pools": {}} if self._placer is None else self._placer.view.describe()
        )
        if self.scaling is not None:
            docs = await self.scaling.current()
            doc["scaling"] = {pool: d.model_dump(mode="json") for pool, d in docs.items()}
        return doc
