"""The router's view of each elastic pool's autoscaler: the `PoolScaling` documents the pools'
policies publish (pdserve.autoscaling.store), read at most once per `max_age_s`.

Used by `/metrics` (the `pdserve_pool_*_replicas`, scaling signal and scale-event metrics) and
`/v1/pdserve/replicas` (its `scaling` entry, which `pdserve top` shows). Only pools that
autoscale on pdserve's policy have a document.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from pdserve.autoscaling.journal import PoolScaling
from pdserve.names import PoolName

Reader = Callable[[str, PoolName], PoolScaling | None]


class ScalingView:
    """Cached reads of the elastic pools' documents. `read` blocks (a GCS round trip), so it
    runs in a worker thread."""

    def __init__(
        self,
        app_name: str,
        pools: tuple[PoolName, ...],
        read: Reader,
        max_age_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._app_name = app_name
        self.pools = pools
        self._read = read
        self._max_age_s = max_age_s
        self._clock = clock
        self._docs: dict[PoolName, PoolScaling] = {}
        self._read_at = float("-inf")

    async def current(self) -> dict[PoolName, PoolScaling]:
        """Each elastic pool's latest document (a pool whose policy published nothing yet is
        absent)."""
        if self.pools and self._clock() - self._read_at >= self._max_age_s:
            self._read_at = self._clock()
            docs = await asyncio.to_thread(self._read_all)
            self._docs = docs
        return dict(self._docs)

    def _read_all(self) -> dict[PoolName, PoolScaling]:
        docs = {}
        for pool in self.pools:
            doc = self._read(self._app_name, pool)
            if doc is not None:
                docs[pool] = doc
        return docs
