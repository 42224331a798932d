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
from collections.abc import Collection, Sequence
from typing import Any, Protocol, TypeVar, cast, get_args

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from pdserve.names import PoolName

log = logging.getLogger("pdserve.router")


class _ReplicaId(Protocol):
    @property
    def unique_id(self) -> str: ...


class _Replica(Protocol):
    """What placement reads of a Ray Serve RunningReplica."""

    @property
    def replica_id(self) -> _ReplicaId: ...

    @property
    def routing_stats(self) -> dict[str, Any] | None: ...


R = TypeVar("R", bound=_Replica)


def _load(replica: _Replica) -> float:
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
        waited_s = 0.0
        if pending_request is not None:
            if pending_request.args:
                target = getattr(pending_request.args[0], "target_replica_id", None)
            waited_s = time.time() - pending_request.created_at
        known = {rid.unique_id for rid in self.curr_replicas}
        ranked, why = rank_replicas(target, candidate_replicas, known, waited_s, self._busy_wait_s)
        if why is not None:
            log.warning("%s replica %s %s; placing by load instead", self.pool, target, why)
        return [ranked] if ranked else []


def rank_replicas(
    target: str | None,
    candidates: Sequence[R],
    known_ids: Collection[str],
    waited_s: float,
    busy_wait_s: float,
) -> tuple[list[R], str | None]:
    """Which replicas may take a request, best first, and why the target was passed over.

    `candidates` are the replicas Ray Serve can send to now (not at capacity); `known_ids`
    every running replica of the deployment. The target alone when it is a candidate; an
    empty list (wait; Ray Serve backs off and asks again) while a known but busy target has
    been waited for less than `busy_wait_s`; otherwise every candidate, least loaded first,
    with the reason ("busy for 5.2 s" / "is gone") — or no reason when there was no target.
    """
    if target is None:
        return _by_load(candidates), None
    for replica in candidates:
        if replica.replica_id.unique_id == target:
            return [replica], None
    if target in known_ids:
        if waited_s < busy_wait_s:
            return [], None
        return _by_load(candidates), f"busy for {waited_s:.1f} s"
    return _by_load(candidates), "is gone"


def _by_load(candidates: Sequence[R]) -> list[R]:
    return sorted(candidates, key=lambda r: (_load(r), r.replica_id.unique_id))
