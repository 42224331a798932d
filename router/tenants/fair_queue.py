"""A tier's fair queue (pure; no I/O, no clock of its own): who runs next when the tier is full.

One `FairQueue` per tier per router replica. `offer` a request with its cost (prefill tier:
predicted prefill seconds; decode tier: 1 stream): it runs at once while the tier has room and
nobody waits, else it waits. `release` a running request (with its measured cost when known):
the waiting requests that now fit start, in this order:
1. the lowest tenant priority class first;
2. within a class, by tenant share:
   - `service` mode (prefill): start-time fair queuing (SFQ). Each tenant has a finish tag F;
     its head request would start at S = max(V, F) and finish at F' = S + cost / weight; the
     smallest S starts and V becomes its S. A tenant that was idle starts at V (no credit
     saved up), a busy one cannot push another below its weighted share of the service.
     `release(measured_cost)` corrects F by (measured - predicted) / weight, so shares are
     in measured seconds;
   - `occupancy` mode (decode): the tenant with the smallest (running cost) / weight;
3. within a tenant: the lowest request priority, then arrival order.
The selected request starts when it fits (`running + cost <= capacity`, or nothing runs); a
big request is never skipped for smaller ones behind it. On top of that each tenant has a
reserved share of the window (capacity x weight / the weights of the tenants running or
waiting): a tenant below it starts at once even when the window is full, so a tenant that sends
little never waits for another's work to drain (the window is exceeded by at most the reserved
shares). A tenant may have at most
`max_queued_per_tenant` waiting (`QueueFull` beyond). Waiting time is bounded by the caller
(router/tenants/gate.py), which `cancel`s a request that waited too long or whose client left.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

QueueMode = Literal["service", "occupancy"]


class QueueFull(Exception):
    """The tenant already has its maximum of requests waiting in this tier's queue."""


@dataclass(slots=True)
class Ticket:
    """One request's place in a tier: waiting, then running until released."""

    tenant: str
    cost: float
    weight: float
    tenant_priority: int
    request_priority: int
    seq: int
    running: bool = False
    done: bool = False


@dataclass
class _TenantState:
    weight: float
    finish_tag: float = 0.0
    running_cost: float = 0.0
    num_running: int = 0
    waiting: list[tuple[int, int, Ticket]] = field(default_factory=list)
    """Heap of (request priority, arrival seq, ticket)."""


class FairQueue:
    def __init__(
        self,
        capacity: Callable[[], float],
        mode: QueueMode = "service",
        max_queued_per_tenant: int = 64,
    ):
        """`capacity()`: the tier's room now, in cost units (read at every offer and release:
        it follows the replicas)."""
        self._capacity = capacity
        self._mode: QueueMode = mode
        self._max_queued = max_queued_per_tenant
        self._tenants: dict[str, _TenantState] = {}
        self._seq = itertools.count()
        self._virtual_time = 0.0
        self.running_cost = 0.0
        self.num_running = 0
        self.num_waiting = 0

    def waiting(self, tenant: str) -> int:
        state = self._tenants.get(tenant)
        return 0 if state is None else len(state.waiting)

    def running(self, tenant: str) -> float:
        state = self._tenants.get(tenant)
        return 0.0 if state is None else state.running_cost

    def offer(
        self,
        tenant: str,
        cost: float,
        weight: float = 1.0,
        tenant_priority: int = 0,
        request_priority: int = 0,
    ) -> tuple[Ticket, list[Ticket]]:
        """Queue a request; returns its ticket (`running` when it started at once) and every
        ticket that started because of this call (it may be among them). Raises QueueFull."""
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _TenantState(weight)
        state.weight = weight
        if len(state.waiting) >= self._max_queued:
            raise QueueFull(tenant)
        ticket = Ticket(tenant, max(0.0, cost), weight, tenant_priority, request_priority,
                        next(self._seq))  # fmt: skip
        heapq.heappush(state.waiting, (request_priority, ticket.seq, ticket))
        self.num_waiting += 1
        return ticket, self._start_what_fits()

    def release(self, ticket: Ticket, measured_cost: float | None = None) -> list[Ticket]:
        """A running request is over (idempotent); returns the tickets that started."""
        if ticket.done or not ticket.running:
            return []
        ticket.done = True
        state = self._tenants[ticket.tenant]
        state.num_running -= 1
        self.num_running -= 1
        # Exactly 0 when nothing runs: float sums drift, and "nothing runs" lets a request
        # bigger than the window start.
        state.running_cost = (
            max(0.0, state.running_cost - ticket.cost) if state.num_running else 0.0
        )
        self.running_cost = max(0.0, self.running_cost - ticket.cost) if self.num_running else 0.0
        if measured_cost is not None and self._mode == "service":
            state.finish_tag += (max(0.0, measured_cost) - ticket.cost) / state.weight
        return self._start_what_fits()

    def cancel(self, ticket: Ticket) -> list[Ticket]:
        """Withdraw a waiting request (timed out, client gone); a running one is released."""
        if ticket.running:
            return self.release(ticket)
        if ticket.done:
            return []
        ticket.done = True
        state = self._tenants[ticket.tenant]
        state.waiting = [w for w in state.waiting if w[2] is not ticket]
        heapq.heapify(state.waiting)
        self.num_waiting -= 1
        return self._start_what_fits()

    def poke(self) -> list[Ticket]:
        """Start what fits now (call when the capacity may have grown)."""
        return self._start_what_fits()

    def _start_what_fits(self) -> list[Ticket]:
        capacity = self._capacity()
        started: list[Ticket] = []
        while self.num_waiting:
            name, start_tag = self._next()
            ticket = self._tenants[name].waiting[0][2]
            if self.num_running and self.running_cost + ticket.cost > capacity:
                break
            self._start(name, start_tag, started, advance=True)
        if self.num_waiting:
            self._start_reserved(capacity, started)
        return started

    def _start_reserved(self, capacity: float, started: list[Ticket]) -> None:
        """Each tenant is guaranteed its weighted share of the window: capacity x its weight /
        the weights of the tenants running or waiting (of the best priority class waiting). A
        tenant below it starts its head even when the window is full, so it never waits for
        another tenant's work to finish (the window may then be exceeded by at most the
        reserved shares)."""
        best_class = min(st.waiting[0][2].tenant_priority for st in self._tenants.values()
                         if st.waiting)  # fmt: skip
        active = sum(
            st.weight
            for st in self._tenants.values()
            if st.num_running or (st.waiting and st.waiting[0][2].tenant_priority == best_class)
        )
        for name, state in self._tenants.items():
            while state.waiting and state.waiting[0][2].tenant_priority == best_class:
                share = capacity * state.weight / active
                if state.running_cost + state.waiting[0][2].cost > share:
                    break
                tag = max(self._virtual_time, state.finish_tag)
                self._start(name, tag, started, advance=False)

    def _start(self, name: str, start_tag: float, started: list[Ticket], advance: bool) -> None:
        """Start the head request of tenant `name` at virtual time `start_tag` (`advance`: the
        queue's virtual time moves to it, as for a start in fair-queuing order)."""
        state = self._tenants[name]
        ticket = heapq.heappop(state.waiting)[2]
        self.num_waiting -= 1
        ticket.running = True
        state.running_cost += ticket.cost
        state.num_running += 1
        self.running_cost += ticket.cost
        self.num_running += 1
        if self._mode == "service":
            if advance:
                self._virtual_time = start_tag
            state.finish_tag = start_tag + ticket.cost / state.weight
        started.append(ticket)

    def _next(self) -> tuple[str, float]:
        """The tenant whose head request goes next, and that request's start tag."""
        best: tuple[int, float, int] | None = None
        pick = ("", 0.0)
        for name, state in self._tenants.items():
            if not state.waiting:
                continue
            head = state.waiting[0][2]
            if self._mode == "service":
                tag = max(self._virtual_time, state.finish_tag)
                share = tag
            else:
                tag = 0.0
                share = state.running_cost / state.weight
            key = (head.tenant_priority, share, head.seq)
            if best is None or key < best:
                best, pick = key, (name, tag)
        return pick
