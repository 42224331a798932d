"""Router-local bookkeeping of in-flight prefills per replica (for load and aging).

Writers: the router calls `start` when it sends a prefill to a replica (the prefill replica,
or the decode replica when the decision is a local prefill) and `finish` when that prefill
completes, fails or is cancelled (exactly once per `start`; a second `finish` returns False).
Readers: the routing pipeline calls `outstanding_s` and `starving_priority` once per
candidate replica per request. Times come from the caller (`now_s`, the router's monotonic
clock), so this is pure bookkeeping with no clock of its own. Not thread-safe.

This only sees the work this router sent. Other router replicas' work shows up in the
replicas' snapshots (`queued_prefill_tokens`), which the pipeline combines with this.
`with_open_streams` does the same for decode: the streams the router has open per decode
replica under the engines' lagging request counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pdserve.router.policy.types import ReplicaSnapshot


@dataclass(frozen=True, slots=True)
class InFlightPrefill:
    """One prefill the router sent and has not seen finish."""

    request_id: str
    est_prefill_s: float
    priority: int
    start_s: float


class OutstandingWork:
    """In-flight prefills per replica, with a running sum of their estimated seconds."""

    def __init__(self) -> None:
        self._in_flight: dict[str, dict[str, InFlightPrefill]] = {}
        self._sum_s: dict[str, float] = {}
        self._changes = ChangeLog()

    def start(
        self, replica_id: str, request_id: str, est_prefill_s: float, priority: int, now_s: float
    ) -> None:
        """Record a prefill sent to `replica_id` at `now_s` with its estimate and engine
        priority. O(1). Raises ValueError if that request is already in flight there."""
        reqs = self._in_flight.setdefault(replica_id, {})
        if request_id in reqs:
            raise ValueError(
                f"request {request_id} is already in flight on {replica_id}; "
                "call finish() before starting it again"
            )
        reqs[request_id] = InFlightPrefill(request_id, est_prefill_s, priority, now_s)
        self._sum_s[replica_id] = self._sum_s.get(replica_id, 0.0) + est_prefill_s
        self._changes.note(replica_id)

    def finish(self, replica_id: str, request_id: str) -> bool:
        """Forget a prefill (done, failed or cancelled). O(1). Returns False when it was not
        in flight (already finished, or its replica was forgotten), True otherwise."""
        reqs = self._in_flight.get(replica_id)
        if reqs is None:
            return False
        item = reqs.pop(request_id, None)
        if item is None:
            return False
        if reqs:
            self._sum_s[replica_id] = max(0.0, self._sum_s[replica_id] - item.est_prefill_s)
        else:  # reset exactly, so float drift cannot accumulate
            del self._in_flight[replica_id]
            del self._sum_s[replica_id]
        self._changes.note(replica_id)
        return True

    def outstanding_s(self, replica_id: str) -> float:
        """Sum of the estimates of prefills in flight on `replica_id` (0.0 if none). O(1).

        Estimates are not reduced by elapsed time: a started prefill counts in full until it
        finishes (the router cannot see how far the engine got)."""
        return self._sum_s.get(replica_id, 0.0)

    def busy(self) -> Mapping[str, float]:
        """`outstanding_s` of every replica with a prefill in flight (read-only view)."""
        return self._sum_s

    @property
    def changes(self) -> ChangeLog:
        """The replicas whose in-flight work changed, in order (for readers that keep their
        own copy, e.g. the pipeline's pool arrays)."""
        return self._changes

    def num_long_in_flight(self, replica_id: str, long_prefill_s: float) -> int:
        """How many in-flight prefills on `replica_id` were estimated at >= long_prefill_s.
        O(k) in the replica's in-flight count."""
        reqs = self._in_flight.get(replica_id)
        if not reqs:
            return 0
        return sum(1 for item in reqs.values() if item.est_prefill_s >= long_prefill_s)

    def num_in_flight(self, replica_id: str) -> int:
        """How many prefills this router has in flight on `replica_id`. O(1)."""
        return len(self._in_flight.get(replica_id, ()))

    def starving_priority(self, replica_id: str, now_s: float, aging_s: float) -> int | None:
        """The engine priority new requests to `replica_id` must not beat, or None.

        A prefill is starving when it has been in flight longer than its own estimate plus
        `aging_s` (`now_s - start_s > est_prefill_s + aging_s`). Returns the numerically
        largest (least urgent) priority among the starving prefills, so a new request given a
        priority >= it is queued behind every one of them (vLLM orders equal priorities by
        arrival). None: nothing is starving, no cap. O(k) in the replica's in-flight count.
        """
        reqs = self._in_flight.get(replica_id)
        if not reqs:
            return None
        worst: int | None = None
        for item in reqs.values():
            if now_s - item.start_s > item.est_prefill_s + aging_s and (
                worst is None or item.priority > worst
            ):
                worst = item.priority
        return worst

    def forget_replica(self, replica_id: str) -> None:
        """The replica is gone: drop its in-flight records (their finish() returns False)."""
        self._in_flight.pop(replica_id, None)
        self._sum_s.pop(replica_id, None)
        self._changes.note(replica_id)


class ChangeLog:
    """The keys that changed, in order, for readers that each keep a cursor (an int from
    `end`). Keeps the last `keep` to `2 * keep` keys: a reader further behind re-reads all."""

    def __init__(self, keep: int = 4096) -> None:
        self._keep = keep
        self._keys: list[str] = []
        self._base = 0

    def note(self, key: str) -> None:
        """O(1) amortised."""
        self._keys.append(key)
        if len(self._keys) > 2 * self._keep:
            drop = len(self._keys) - self._keep
            del self._keys[:drop]
            self._base += drop

    @property
    def end(self) -> int:
        """The cursor after the last change."""
        return self._base + len(self._keys)

    def since(self, cursor: int) -> list[str] | None:
        """Keys changed after `cursor` (repeats possible); None when they were trimmed."""
        if cursor < self._base:
            return None
        return self._keys[cursor - self._base :]


class OpenStreams:
    """Decode streams this router has open per decode replica (the Placer's count), with a
    change log for the pipeline's pool arrays."""

    def __init__(self) -> None:
        self._count: dict[str, int] = {}
        self.changes = ChangeLog()

    def get(self, replica_id: str) -> int:
        return self._count.get(replica_id, 0)

    def items(self) -> Iterable[tuple[str, int]]:
        return self._count.items()

    def add(self, replica_id: str, delta: int) -> None:
        """Open (delta > 0) or close (< 0) streams on `replica_id`; never below 0."""
        left = self._count.get(replica_id, 0) + delta
        if left > 0:
            self._count[replica_id] = left
        else:
            self._count.pop(replica_id, None)
        self.changes.note(replica_id)

    def as_dict(self) -> dict[str, int]:
        return dict(self._count)


def with_open_streams(
    snapshots: Sequence[ReplicaSnapshot], open_streams: dict[str, int]
) -> list[ReplicaSnapshot]:
    """Decode snapshots whose running + waiting count is at least the streams this router has
    open on the replica (the shortfall added to waiting). An engine's stats lag by up to a
    refresh, so without this a burst placed between two refreshes sees the same idle replicas
    each time and, scores tied, every stream goes to the lowest replica id. With several
    router replicas the engine's count, once fresh, still includes the others' streams."""
    out = []
    for s in snapshots:
        shortfall = open_streams.get(s.replica_id, 0) - (
            s.num_running_requests + s.num_waiting_requests
        )
        if shortfall > 0:
            s = dataclasses.replace(s, num_waiting_requests=s.num_waiting_requests + shortfall)
        out.append(s)
    return out
