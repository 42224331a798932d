"""Ray Serve request router for the prefill and decode deployments (placement enforcement).

Ray Serve builds one `PdserveRequestRouter` per deployment handle in the Router replica's
process. It does two things:
- places each request on the replica the router's policy chose (`target_replica_id` on the
  PrefillRequest/DecodeRequest), waiting while that replica is at capacity for at most
  `busy_replica_wait_s` (`router.deadlines.busy_replica_wait_seconds`, kept below the KV
  lease), and falling back to the least-loaded replica when the wait runs out or the target
  is gone;
- attaches itself to the Router instance (through Ray Serve's replica context), so the
  router's policy sees every replica of the pool with its routing stats (reported by the
  replicas' `record_routing_stats`, polled by Ray Serve every request_routing_stats_period_s).
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast, get_args

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from pdserve.router.policy.types import PoolName

log = logging.getLogger("pdserve.router")


def _load(replica: RunningReplica) -> float:
    stats = replica.routing_stats or {}
    return float(stats.get("num_running_requests", 0)) + float(stats.get("num_waiting_requests", 0))


class PdserveRequestRouter(RequestRouter):  # type: ignore[misc]  # Ray is Any to mypy
    """Places requests on the replica named in the request; see module docstring."""

    def initialize_state(
        self, pool: str = "", busy_replica_wait_s: float = 5.0, **kwargs: Any
    ) -> None:
        if pool not in get_args(PoolName):
            raise ValueError(
                f"request_router_kwargs.pool must be 'prefill' or 'decode', got {pool!r}"
            )
        self.pool = cast(PoolName, pool)
        self._busy_wait_s = busy_replica_wait_s
        self._attached = False
        self._try_attach()

    def _try_attach(self) -> None:
        """Attach to the Router instance of this process. Ray Serve may build the request
        router while the Router's constructor still runs, so this is retried on replica
        updates and on the first routed request."""
        if self._attached:
            return
        try:
            from ray import serve

            owner = serve.get_replica_context().servable_object
        except Exception:  # not inside a replica (a driver or a test), or not yet
            return
        attach = getattr(owner, "attach_request_router", None)
        if attach is not None:
            attach(self.pool, self)
            self._attached = True
            log.info("%s request router attached to the router's replica view", self.pool)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        self._try_attach()

    def replicas(self) -> list[tuple[str, dict[str, Any]]]:
        """(replica id, routing stats) of every running replica of this deployment."""
        return [
            (rid.unique_id, dict(replica.routing_stats or {}))
            for rid, replica in self.curr_replicas.items()
        ]

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        self._try_attach()
        target = None
        if pending_request is not None and pending_request.args:
            target = getattr(pending_request.args[0], "target_replica_id", None)
        if target is not None:
            for replica in candidate_replicas:
                if replica.replica_id.unique_id == target:
                    return [[replica]]
            if any(rid.unique_id == target for rid in self.curr_replicas):
                created_s = pending_request.created_at if pending_request else time.time()
                waited_s = time.time() - created_s
                if waited_s < self._busy_wait_s:
                    return []  # the chosen replica is busy: wait for it (Ray Serve backs off)
                log.warning(
                    "%s replica %s busy for %.1f s; placing by load instead",
                    self.pool,
                    target,
                    waited_s,
                )
            else:
                log.warning("%s replica %s is gone; placing by load instead", self.pool, target)
        return [sorted(candidate_replicas, key=lambda r: (_load(r), r.replica_id.unique_id))]
