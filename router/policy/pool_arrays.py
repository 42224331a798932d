"""One pool's replicas as arrays, kept by the pipeline between decisions (pure).

Built from a snapshot list once (`PoolArrays.build`, O(replicas): the router passes a new list
only when its replica view refreshes, every 50 ms), then kept in step with the router's own
state by its change logs (`sync`: O(replicas whose in-flight work or open streams changed
since the last decision), so O(1) per decision at a steady rate). `pool_kernel.evaluate`
reads these arrays and writes its results into the `out_*` buffers (reused by every
decision). Row i is `snapshots[i]` in every array.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pdserve.names import PoolName
from pdserve.router.policy.cost_model import CostModel
from pdserve.router.policy.pool_kernel import SCORER_ORDER, TOP_ROWS
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.policy.state import OpenStreams, OutstandingWork
from pdserve.router.policy.types import Candidate, ReplicaSnapshot


@dataclass
class PoolArrays:
    """A pool's snapshots as arrays plus this router's in-flight work and open streams."""

    snapshots: Sequence[ReplicaSnapshot]
    row_of: dict[str, int]
    healthy: np.ndarray
    reported_requests: np.ndarray
    """Running + waiting requests the engine reported."""
    kv_usage: np.ndarray
    backlog_s: np.ndarray
    """The engine's reported prefill queue, costed by the cost model."""
    id_rank: np.ndarray
    """Rank of each replica id in sorted order (ties go to the lowest id)."""
    index_slots: np.ndarray
    """Each replica's slot in the prefix index (-1: unknown, reads the depth array's 0)."""
    index_version: int
    requests: np.ndarray
    """`reported_requests`, raised to this router's open streams where those are more."""
    mine_s: np.ndarray
    """This router's in-flight prefill estimates per replica (OutstandingWork.outstanding_s)."""
    longs: np.ndarray
    """This router's long prefills in flight per replica (lanes on only)."""
    work: OutstandingWork | None = None
    work_cursor: int = 0
    streams: OpenStreams | None = None
    streams_cursor: int = 0
    out_cached: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    out_est_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    out_outstanding_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    out_keep: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    out_scores: np.ndarray = field(default_factory=lambda: np.zeros((0, len(SCORER_ORDER))))
    out_totals: np.ndarray = field(default_factory=lambda: np.zeros(0))
    out_top: np.ndarray = field(default_factory=lambda: np.zeros(TOP_ROWS, np.int64))
    out_fastest: np.ndarray = field(default_factory=lambda: np.zeros(TOP_ROWS, np.int64))

    @classmethod
    def build(
        cls,
        pool: PoolName,
        snapshots: Sequence[ReplicaSnapshot],
        cost: CostModel,
        index: PrefixIndex,
    ) -> PoolArrays:
        """Raises ValueError when a snapshot belongs to the other pool."""
        for s in snapshots:
            if s.pool != pool:
                raise ValueError(f"replica {s.replica_id} is a {s.pool} replica, passed as {pool}")
        n = len(snapshots)
        reported = np.fromiter(
            (s.num_running_requests + s.num_waiting_requests for s in snapshots), np.int64, n
        )
        rank = np.empty(n, np.int64)
        rank[sorted(range(n), key=lambda i: snapshots[i].replica_id)] = np.arange(n)
        return cls(
            snapshots=snapshots,
            row_of={s.replica_id: i for i, s in enumerate(snapshots)},
            healthy=np.fromiter((s.healthy for s in snapshots), bool, n),
            reported_requests=reported,
            kv_usage=np.fromiter((s.kv_cache_usage for s in snapshots), float, n),
            backlog_s=np.fromiter(
                (
                    cost.est_backlog_s(s.queued_prefill_tokens, s.num_queued_prefills)
                    for s in snapshots
                ),
                float,
                n,
            ),
            id_rank=rank,
            index_slots=_slots(snapshots, index),
            index_version=index.slots_version,
            requests=reported.copy(),
            mine_s=np.zeros(n),
            longs=np.zeros(n, np.int64),
            out_cached=np.zeros(n, np.int64),
            out_est_s=np.zeros(n),
            out_outstanding_s=np.zeros(n),
            out_keep=np.zeros(n, bool),
            out_scores=np.zeros((n, len(SCORER_ORDER))),
            out_totals=np.zeros(n),
        )

    def sync(
        self,
        index: PrefixIndex,
        work: OutstandingWork,
        streams: OpenStreams | None,
        lane_long_prefill_s: float | None,
    ) -> None:
        """Bring the index slots, in-flight work and open streams up to date."""
        if self.index_version != index.slots_version:
            self.index_slots = _slots(self.snapshots, index)
            self.index_version = index.slots_version
        row_of = self.row_of
        changed = work.changes.since(self.work_cursor) if self.work is work else None
        if changed is None:
            self.work = work
            self.mine_s[:] = 0.0
            self.longs[:] = 0
            changed = list(work.busy())
        for rid in changed:
            row = row_of.get(rid)
            if row is not None:
                self.mine_s[row] = work.outstanding_s(rid)
                if lane_long_prefill_s is not None:
                    self.longs[row] = work.num_long_in_flight(rid, lane_long_prefill_s)
        self.work_cursor = work.changes.end
        if streams is None:
            if self.streams is not None:
                self.requests[:] = self.reported_requests
                self.streams = None
            return
        opened = streams.changes.since(self.streams_cursor) if self.streams is streams else None
        if opened is None:
            self.streams = streams
            self.requests[:] = self.reported_requests
            opened = [rid for rid, _ in streams.items()]
        for rid in opened:
            row = row_of.get(rid)
            if row is not None:
                self.requests[row] = max(int(self.reported_requests[row]), streams.get(rid))
        self.streams_cursor = streams.changes.end

    def candidate(self, row: int, transfer_s: float) -> Candidate:
        """Row `row` of the last `pool_kernel.evaluate` as a `Candidate` (its snapshot with
        this router's open streams counted in its waiting requests)."""
        snap = self.snapshots[row]
        shortfall = int(self.requests[row] - self.reported_requests[row])
        if shortfall > 0:
            snap = dataclasses.replace(
                snap, num_waiting_requests=snap.num_waiting_requests + shortfall
            )
        return Candidate(
            snap,
            int(self.out_cached[row]),
            float(self.out_est_s[row]),
            float(self.out_outstanding_s[row]),
            int(self.longs[row]),
            transfer_s,
        )


def _slots(snapshots: Sequence[ReplicaSnapshot], index: PrefixIndex) -> np.ndarray:
    return np.fromiter((index.slot(s.replica_id) for s in snapshots), np.int64, len(snapshots))
