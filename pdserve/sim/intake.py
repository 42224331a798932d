"""The serving layer's intake: the CPU work of taking a prompt in (the client's request body,
the router's parse and tokenization, Ray Serve's hand-over to a replica and the replica's front
end), on the host cores the engines share.

Part of the `cpu_host` block's model (a profile without the block takes nothing in). A
request's own share of it is already in its router and client times (the per-token terms of
`CpuHost.router_per_token_s` and `client_per_token_s`; each prompt's share is spread as the
client's time is, with its mean kept: `HostEffects.intake_s`). What this adds is what that
work does to the requests already in flight: while the intake is busy with other requests'
prompts, a first chunk on its way back to the client waits for it (measured on the CPU host:
the short requests a burst of long prompts lands on were the slowest of their class).

Only first chunks wait for it: later chunks' gaps are fitted to the run's streams as they are
(decode-path spread, stalls), so delaying them too would count the intake twice. A host stall
does not move the busy stretches.

Pure: intervals on the simulation clock, first in first out."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass(slots=True)
class Intake:
    """Busy intervals of the serving layer's intake, in the order the work arrived."""

    _starts_s: list[float] = field(default_factory=list)
    _ends_s: list[float] = field(default_factory=list)
    _owners: list[str] = field(default_factory=list)
    _free_at_s: float = 0.0

    def take_in(self, owner: str, now_s: float, work_s: float) -> None:
        """`owner`'s prompt arrives at `now_s` and keeps the intake busy for `work_s`, after
        the work queued before it."""
        if work_s <= 0:
            return
        start = max(now_s, self._free_at_s)
        self._free_at_s = start + work_s
        self._starts_s.append(start)
        self._ends_s.append(self._free_at_s)
        self._owners.append(owner)

    def passes_at(self, owner: str, at_s: float) -> float:
        """When something of `owner`'s that would pass at `at_s` gets through: at the end of
        the busy stretch of other requests' work that `at_s` falls in (`at_s` if none)."""
        t = at_s
        i = bisect.bisect_right(self._starts_s, t) - 1
        while i >= 0 and self._ends_s[i] > t:
            if self._owners[i] != owner:
                t = self._ends_s[i]
                i = bisect.bisect_right(self._starts_s, t) - 1
            else:
                i -= 1
        return t


@dataclass(slots=True)
class ReplicaIntake:
    """Each decode replica taking in the prompts it prefills itself
    (`CpuHost.local_intake_per_token_s`): one prompt at a time per replica, so a prompt sent
    while its replica still takes in another waits for it."""

    _free_s: dict[str, float] = field(default_factory=dict)

    def take_in(self, replica_id: str, now_s: float, work_s: float) -> float:
        """The wait and the work, from `now_s`, of `replica_id` taking in `work_s` of prompt."""
        if work_s <= 0:
            return 0.0
        start_s = max(now_s, self._free_s.get(replica_id, 0.0))
        self._free_s[replica_id] = start_s + work_s
        return start_s + work_s - now_s
