"""The tier fair queue (pure): weighted shares under saturation, no saved-up credit for an idle
tenant, priority classes, measured-cost correction, bounded queues, cancellation."""

from __future__ import annotations

import random

import pytest

from pdserve.router.tenants.fair_queue import FairQueue, QueueFull, Ticket


class Tier:
    """A tier that works like an engine queue: the tickets the fair queue started are served
    one after another in start order, each for its cost in seconds (the queue keeps at most
    `capacity` seconds of them started)."""

    def __init__(self, capacity: float, mode: str = "service", max_queued: int = 10_000):
        self.queue = FairQueue(lambda: capacity, mode, max_queued)  # type: ignore[arg-type]
        self.running: list[Ticket] = []
        self.now = 0.0
        self.served: dict[str, float] = {}

    def offer(self, tenant: str, cost: float, weight: float = 1.0, cls: int = 0) -> Ticket:
        ticket, started = self.queue.offer(tenant, cost, weight, cls)
        self.running += started
        return ticket

    def step(self) -> Ticket:
        """Serve the oldest started ticket to its end."""
        ticket = self.running.pop(0)
        self.now += ticket.cost
        self.served[ticket.tenant] = self.served.get(ticket.tenant, 0.0) + ticket.cost
        self.running += self.queue.release(ticket)
        return ticket


def test_a_free_tier_starts_requests_at_once_and_queues_when_full() -> None:
    tier = Tier(capacity=2.0)
    a = tier.offer("a", 1.5)
    more = tier.offer("a", 1.0)
    assert a.running and not more.running
    assert tier.queue.num_waiting == 1
    tier.step()
    assert more.running


def test_a_tenant_below_its_reserved_share_starts_even_when_the_window_is_full() -> None:
    q = FairQueue(lambda: 1.0)
    flood = [q.offer("a", 0.5)[0] for _ in range(6)]
    assert sum(t.running for t in flood) == 2  # a alone: the whole window
    light, _ = q.offer("b", 0.3)
    assert light.running, "b's share is half the window: it does not wait for a's work"
    second, _ = q.offer("b", 0.3)
    assert not second.running, "0.6 would pass b's share (0.5)"
    assert q.running_cost == pytest.approx(1.3)  # over the window by b's reserved share


def test_a_request_bigger_than_the_tier_runs_alone() -> None:
    tier = Tier(capacity=1.0)
    big = tier.offer("a", 5.0)
    assert big.running
    small = tier.offer("a", 0.1)
    assert not small.running
    tier.step()
    assert small.running


@pytest.mark.parametrize(("wa", "wb"), [(1.0, 1.0), (3.0, 1.0), (1.0, 4.0)])
def test_backlogged_tenants_share_service_by_weight(wa: float, wb: float) -> None:
    rng = random.Random(7)
    tier = Tier(capacity=1.0)
    for _ in range(400):  # both always backlogged, costs of different sizes
        tier.offer("a", rng.uniform(0.05, 0.5), wa)
        tier.offer("b", rng.uniform(0.05, 0.2), wb)
    while tier.now < 40.0:
        tier.step()
    ratio = tier.served["a"] / tier.served["b"]
    assert ratio == pytest.approx(wa / wb, rel=0.1)


def test_a_light_tenant_is_served_before_a_flood_queued_ahead_of_it() -> None:
    tier = Tier(capacity=1.0)
    flood = [tier.offer("a", 0.5) for _ in range(50)]
    light = tier.offer("b", 0.5)
    tier.step()  # the first two of the flood ran
    tier.step()
    assert light.running, "b waits for at most the requests already running"
    assert sum(t.running or t.done for t in flood) <= 3


def test_an_idle_tenant_saves_up_no_credit() -> None:
    tier = Tier(capacity=1.0)
    for _ in range(40):
        tier.offer("a", 0.25)
    while tier.now < 5.0:
        tier.step()  # only a was served for 5 s
    for _ in range(40):
        tier.offer("b", 0.25)
    order: list[str] = []
    for _ in range(20):
        order.append(tier.step().tenant)
    # From now on a and b alternate: b is not owed the 5 s it did not want.
    assert 8 <= order[4:].count("a") <= 10


def test_measured_cost_corrects_the_share() -> None:
    """a's requests are predicted at 0.1 s but take 0.3 s: charged by the measurement, a gets
    about a third as many requests as b through."""
    q = FairQueue(lambda: 0.1, "service", max_queued_per_tenant=1000)
    counts = {"a": 0, "b": 0}
    running: list[Ticket] = []
    for _ in range(300):
        for tenant in ("a", "b"):
            _, started = q.offer(tenant, 0.1)
            running += started
    for _ in range(200):
        ticket = running.pop(0)
        counts[ticket.tenant] += 1
        running += q.release(ticket, 0.3 if ticket.tenant == "a" else 0.1)
    assert counts["b"] / counts["a"] == pytest.approx(3.0, rel=0.15)


def test_a_lower_priority_class_goes_first() -> None:
    tier = Tier(capacity=1.0)
    tier.offer("batch", 1.0, cls=1)
    queued_batch = tier.offer("batch", 1.0, cls=1)
    interactive = tier.offer("chat", 1.0, cls=0)
    tier.step()
    assert interactive.running and not queued_batch.running


def test_within_a_tenant_request_priority_then_arrival() -> None:
    q = FairQueue(lambda: 1.0)
    first, _ = q.offer("a", 1.0)
    late, _ = q.offer("a", 1.0, request_priority=5)
    urgent, _ = q.offer("a", 1.0, request_priority=0)
    assert q.release(first) == [urgent]
    assert q.release(urgent) == [late]


def test_occupancy_mode_gives_the_next_slot_to_the_tenant_furthest_below_its_share() -> None:
    q = FairQueue(lambda: 4.0, "occupancy")
    a = [q.offer("a", 1.0, 1.0)[0] for _ in range(4)]  # a alone holds every slot
    b = [q.offer("b", 1.0, 1.0)[0] for _ in range(3)]
    assert [t.running for t in b] == [True, True, False], "b's reserved half: 2 slots at once"
    more_a = q.offer("a", 1.0, 1.0)[0]
    assert not more_a.running
    assert q.release(a[0]) == [] and q.release(a[1]) == []  # back to 4 slots in use
    assert q.release(a[2]) == [more_a], "a has 1 stream, b 2: a is further below its share"
    assert not b[2].running


def test_a_tenant_may_queue_only_so_many() -> None:
    q = FairQueue(lambda: 1.0, max_queued_per_tenant=2)
    q.offer("a", 1.0)  # runs
    q.offer("a", 1.0)
    q.offer("a", 1.0)
    with pytest.raises(QueueFull):
        q.offer("a", 1.0)
    assert q.offer("b", 1.0)[0] is not None  # other tenants still queue


def test_cancel_withdraws_a_waiting_request_and_release_is_idempotent() -> None:
    q = FairQueue(lambda: 1.0)
    running, _ = q.offer("a", 1.0)
    gone, _ = q.offer("b", 1.0)
    next_one, _ = q.offer("c", 1.0)
    assert q.cancel(gone) == []
    assert q.num_waiting == 1
    assert q.release(running) == [next_one]
    assert q.release(running) == []
    assert q.running_cost == pytest.approx(1.0)
    q.cancel(next_one)  # a running ticket: released
    assert q.running_cost == 0.0 and q.num_waiting == 0


def test_capacity_is_read_live() -> None:
    capacity = [1.0]
    q = FairQueue(lambda: capacity[0])
    q.offer("a", 1.0)
    waiting, _ = q.offer("a", 1.0)
    assert not waiting.running
    capacity[0] = 2.0  # a replica joined
    assert q.poke() == [waiting]
    with pytest.raises(QueueFull):
        FairQueue(lambda: 1.0, max_queued_per_tenant=0).offer("a", 1.0)


def test_nothing_running_is_exactly_nothing_despite_float_drift() -> None:
    q = FairQueue(lambda: 1.0)
    tickets = [q.offer("a", c)[0] for c in (0.049, 0.256, 0.231)]  # sums drift
    for t in tickets:
        q.release(t)
    assert q.running_cost == 0.0
    big, _ = q.offer("a", 5.0)
    assert big.running, "a request bigger than the window runs when nothing else does"
