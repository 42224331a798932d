"""`warm_up_kernels`: compile the routing kernels before the router's first request (called
once at router start-up by router/deployment.py)."""

from __future__ import annotations

from pdserve.router.policy.pipeline import RoutingPolicy
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.policy.state import OutstandingWork
from pdserve.router.policy.types import ReplicaSnapshot, RequestSummary


def warm_up_kernels() -> None:
    """Compile (or load from numba's disk cache) every kernel a decision and the prefix
    index use, with one decision on a two-replica fleet in each index mode: the router calls
    it at start-up so that its first request does not pay seconds of compilation."""
    for mode in ("events", "approximate"):
        index = PrefixIndex(mode=mode)
        index.add_blocks("p0", [1, 2])
        index.on_routed("d0", [1])
        index.remove_blocks("p0", [2])
        index.num_cached_blocks("p0", [1, 2])
        index.set_capacity("p0", 1)
        index.clear("p0")
        index.forget_replica("p0")
        snaps = {
            pool: [ReplicaSnapshot(f"{pool[0]}0", pool, 0, 0, 0.5, 0)]
            for pool in ("prefill", "decode")
        }
        request = RequestSummary("warm-up", 4096, (1, 2), 0, 0.0)
        RoutingPolicy().decide(
            request, snaps["prefill"], snaps["decode"], index, OutstandingWork(), 0.0
        )
