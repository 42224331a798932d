"""The baselines' load measure: running + waiting requests per replica (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from pdserve.names import PoolName
from pdserve.router.policy.types import NoReplicaError, ReplicaSnapshot


def replica_load(s: ReplicaSnapshot) -> int:
    n: int = s.num_running_requests + s.num_waiting_requests
    return n


def least_loaded(pool: PoolName, snapshots: Sequence[ReplicaSnapshot]) -> ReplicaSnapshot:
    """Fewest running + waiting requests among healthy replicas; ties by lowest replica id."""
    healthy = [s for s in snapshots if s.healthy]
    if not healthy:
        raise NoReplicaError(pool, f"{len(snapshots)} known, none healthy")
    return min(healthy, key=lambda s: (replica_load(s), s.replica_id))
