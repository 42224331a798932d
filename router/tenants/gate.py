"""The async side of a tier's fair queue: a request awaits its turn (router/tenants/fair_queue.py
decides whose turn it is).

`TierGate` is built once per tier per router replica (`TierGates.build`) and used by the
orchestrator: `await gate.enter(tenant, cost, request_priority)` returns a `Pass` once the
request may use the tier — at once while the tier has room and nobody waits — or raises
`AdmissionRejected` (429: `fair_queue_full` when the tenant already has
`max_queued_per_tenant` waiting, `fair_queue_timeout` after `max_queue_seconds`). The holder
calls `Pass.leave(measured_cost)` when its work on the tier is over (prefill: finished;
decode: the stream ended); a cancelled wait (client gone) leaves the queue. The prefill tier
scales predicted costs by what its engines measured lately (`CostScale`), so its window is in
measured engine seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from pdserve.router.admission import AdmissionRejected
from pdserve.router.policy.pace import CostScale
from pdserve.router.tenants.directory import Tenant
from pdserve.router.tenants.fair_queue import FairQueue, QueueFull, QueueMode, Ticket


class Pass:
    """A request's hold on a tier; `leave` once (later calls do nothing)."""

    def __init__(self, gate: TierGate, ticket: Ticket, waited_s: float, predicted: float):
        self._gate = gate
        self._ticket = ticket
        self._predicted = predicted
        self.waited_s = waited_s
        """How long the request waited in the tier's queue."""

    def leave(self, measured_cost: float | None = None) -> None:
        """The request's work on the tier is over; `measured_cost`: what it really cost (the
        engine's prefill seconds), when known."""
        gate = self._gate
        if measured_cost is not None and not self._ticket.done and gate.scale is not None:
            gate.scale.observe(self._predicted, measured_cost)
        gate._wake(gate.queue.release(self._ticket, measured_cost))


class TierGate:
    def __init__(
        self,
        tier: str,
        queue: FairQueue,
        clock: Callable[[], float],
        max_wait_s: float,
        scale: CostScale | None = None,
    ):
        """`scale`: predicted costs are multiplied by its ratio, which `Pass.leave`'s measured
        costs keep up to date (None: costs as given)."""
        self.tier = tier
        self.scale = scale
        self.queue = queue
        self._clock = clock
        self._max_wait_s = max_wait_s
        self._waiters: dict[int, asyncio.Future[None]] = {}

    async def enter(self, tenant: Tenant, cost: float, request_priority: int = 0) -> Pass:
        """Wait for the tier; `cost` as predicted (scaled by `scale` when there is one)."""
        start = self._clock()
        predicted = cost
        if self.scale is not None:
            cost = cost * self.scale.ratio
        try:
            ticket, started = self.queue.offer(
                tenant.name, cost, tenant.weight, tenant.priority, request_priority
            )
        except QueueFull:
            raise AdmissionRejected(
                "fair_queue_full",
                f"tenant {tenant.name} already has {self.queue.waiting(tenant.name)} requests "
                f"waiting for the {self.tier} tier on this router "
                "(router.tenants.max_queued_per_tenant)",
                1.0,
            ) from None
        self._wake([t for t in started if t is not ticket])
        if ticket.running:
            return Pass(self, ticket, 0.0, predicted)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[ticket.seq] = future
        try:
            await asyncio.wait_for(asyncio.shield(future), self._max_wait_s)
        except TimeoutError:
            self._waiters.pop(ticket.seq, None)
            if not ticket.running:
                self._wake(self.queue.cancel(ticket))
                raise AdmissionRejected(
                    "fair_queue_timeout",
                    f"the {self.tier} tier stayed full for {self._max_wait_s:g} s while this "
                    f"request of tenant {tenant.name} waited for its share "
                    "(router.tenants.max_queue_seconds)",
                    self._max_wait_s / 2,
                ) from None
        except BaseException:
            self._waiters.pop(ticket.seq, None)
            self._wake(self.queue.cancel(ticket))  # releases it if it had started meanwhile
            raise
        return Pass(self, ticket, self._clock() - start, predicted)

    def poke(self) -> None:
        """Start what fits now (the tier may have grown)."""
        self._wake(self.queue.poke())

    def _wake(self, started: list[Ticket]) -> None:
        for ticket in started:
            future = self._waiters.pop(ticket.seq, None)
            if future is not None and not future.done():
                future.set_result(None)


@dataclass(frozen=True, slots=True)
class TierGates:
    """The prefill and decode gates of one router replica."""

    prefill: TierGate
    decode: TierGate | None
    """None: no decode stream bound to share (router.tenants.decode_streams_per_replica and
    router.admission.max_decode_streams both None)."""

    @classmethod
    def build(
        cls,
        prefill_capacity_s: Callable[[], float],
        decode_capacity_streams: Callable[[], float] | None,
        clock: Callable[[], float],
        max_wait_s: float,
        max_queued_per_tenant: int,
    ) -> TierGates:
        prefill = TierGate(
            "prefill",
            FairQueue(prefill_capacity_s, "service", max_queued_per_tenant),
            clock,
            max_wait_s,
            CostScale(),
        )
        decode = None
        if decode_capacity_streams is not None:
            mode: QueueMode = "occupancy"
            queue = FairQueue(decode_capacity_streams, mode, max_queued_per_tenant)
            decode = TierGate("decode", queue, clock, max_wait_s)
        return cls(prefill, decode)
