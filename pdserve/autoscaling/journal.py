"""What a pool's autoscaler is doing, as the router and `pdserve top` show it (pure).

The pool's policy (`serve_policy.PoolPolicy`, in Ray Serve's controller) feeds a
`ScalingJournal` on every control-loop tick; the journal turns the ticks into a `PoolScaling`
document: the replica counts, the signal against its target, and the recent scale events. A
scale event is a change of Ray Serve's target replica count (what Serve will run), with the
reason of the policy's latest decision in that direction (Serve applies a change only after
its delay, so the decision that asked for it came a little earlier).
"""

from __future__ import annotations

from collections import deque

from pydantic import BaseModel, ConfigDict

from pdserve.autoscaling.policy import ScaleDecision
from pdserve.names import PoolName

MAX_EVENTS = 20


class ScaleEvent(BaseModel):
    """Ray Serve's target replica count for a pool changed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    unix_s: float
    from_replicas: int
    to_replicas: int
    reason: str


class PoolScaling(BaseModel):
    """One pool's autoscaling state. `signal` is the policy's per-replica signal (prefill:
    queued prefill seconds; decode: KV-cache usage) and `signal_target` its target; `events`
    oldest first, at most `MAX_EVENTS`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pool: PoolName
    current_replicas: int
    target_replicas: int
    wanted_replicas: int
    signal: float
    signal_target: float
    reason: str
    updated_unix_s: float
    events: tuple[ScaleEvent, ...] = ()


class ScalingJournal:
    """Accumulates one pool's ticks. Not thread-safe (one policy instance calls it)."""

    def __init__(self, pool: PoolName, publish_every_s: float = 1.0) -> None:
        self.pool: PoolName = pool
        self._publish_every_s = publish_every_s
        self._target: int | None = None
        self._reasons: dict[str, str] = {}
        self._events: deque[ScaleEvent] = deque(maxlen=MAX_EVENTS)
        self._num_events = 0
        self._published: tuple[int, int, int, int] | None = None
        self._published_s = float("-inf")

    def tick(
        self, decision: ScaleDecision, current: int, target: int, now_unix_s: float
    ) -> tuple[PoolScaling | None, ScaleEvent | None]:
        """Fold one tick in. Returns the document when it should be published (something
        changed, or `publish_every_s` passed since the last one; else None) and the scale
        event this tick revealed (else None)."""
        if decision.direction != "hold":
            self._reasons[decision.direction] = decision.reason
        event = None
        if self._target is not None and target != self._target:
            direction = "up" if target > self._target else "down"
            reason = self._reasons.get(direction, "set outside the policy (deploy or restart)")
            event = ScaleEvent(
                unix_s=now_unix_s, from_replicas=self._target, to_replicas=target, reason=reason
            )
            self._events.append(event)
            self._num_events += 1
        self._target = target
        key = (current, target, decision.replicas, self._num_events)
        if key == self._published and now_unix_s - self._published_s < self._publish_every_s:
            return None, event
        self._published, self._published_s = key, now_unix_s
        doc = PoolScaling(
            pool=self.pool,
            current_replicas=current,
            target_replicas=target,
            wanted_replicas=decision.replicas,
            signal=decision.signal,
            signal_target=decision.target,
            reason=decision.reason,
            updated_unix_s=now_unix_s,
            events=tuple(self._events),
        )
        return doc, event
