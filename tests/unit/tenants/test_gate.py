"""The async tier gate: waiting for a turn, leaving, the wait bound, a full queue and a client
that goes away while waiting."""

from __future__ import annotations

import asyncio

import pytest

from pdserve.router.admission import AdmissionRejected
from pdserve.router.tenants.directory import Tenant
from pdserve.router.tenants.fair_queue import FairQueue
from pdserve.router.tenants.gate import TierGate

A, B = Tenant("a"), Tenant("b", weight=2.0)


def gate(max_wait_s: float = 5.0, max_queued: int = 8) -> TierGate:
    return TierGate("prefill", FairQueue(lambda: 1.0, "service", max_queued), lambda: 0.0,
                    max_wait_s)  # fmt: skip


async def test_a_request_waits_until_the_tier_has_room() -> None:
    g = gate()
    first = await g.enter(A, 1.0)
    waiting = asyncio.create_task(g.enter(B, 1.0))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    first.leave(measured_cost=1.2)
    second = await asyncio.wait_for(waiting, 1.0)
    second.leave()
    second.leave()  # idempotent
    assert g.queue.running_cost == 0.0


async def test_the_wait_is_bounded_and_leaves_nothing_queued() -> None:
    g = gate(max_wait_s=0.05)
    held = await g.enter(A, 1.0)
    with pytest.raises(AdmissionRejected) as err:
        await g.enter(B, 1.0)
    assert err.value.status == 429 and err.value.reason == "fair_queue_timeout"
    assert g.queue.num_waiting == 0
    held.leave()
    assert g.queue.running_cost == 0.0


async def test_a_full_queue_refuses_at_once() -> None:
    g = gate(max_queued=1)
    await g.enter(A, 1.0)
    queued = asyncio.create_task(g.enter(A, 1.0))
    await asyncio.sleep(0.01)
    with pytest.raises(AdmissionRejected) as err:
        await g.enter(A, 1.0)
    assert err.value.reason == "fair_queue_full" and "max_queued_per_tenant" in err.value.message
    queued.cancel()


async def test_a_client_gone_while_waiting_leaves_the_queue() -> None:
    g = gate()
    held = await g.enter(A, 1.0)
    waiting = asyncio.create_task(g.enter(B, 1.0))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert g.queue.num_waiting == 0
    held.leave()
    assert g.queue.running_cost == 0.0


def test_cost_scale_follows_measured_over_predicted() -> None:
    from pdserve.router.tenants.gate import CostScale

    scale = CostScale(weight=0.5)
    assert scale.ratio == 1.0
    for _ in range(30):
        scale.observe(predicted=0.2, measured=0.05)
    assert scale.ratio == pytest.approx(0.25, rel=1e-3)
    scale.observe(0.0, 1.0)  # ignored
    scale.observe(1.0, 1000.0)  # clamped to 20x
    assert scale.ratio < 0.25 * 20


async def test_the_prefill_window_is_sized_in_measured_seconds() -> None:
    """Predictions 4x too high: after a few measured prefills the window (1 s) holds about
    4 predicted seconds of requests, not 1."""
    from pdserve.router.tenants.gate import CostScale

    g = TierGate("prefill", FairQueue(lambda: 1.0), lambda: 0.0, 5.0, CostScale(weight=1.0))
    first = await g.enter(A, 0.8)
    first.leave(measured_cost=0.2)
    held = [await asyncio.wait_for(g.enter(A, 0.8), 0.1) for _ in range(5)]
    assert g.queue.running_cost == pytest.approx(1.0)
    waiting = asyncio.create_task(g.enter(A, 0.8))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    for p in held:
        p.leave(0.2)
    (await waiting).leave(0.2)


@pytest.mark.parametrize("seed", range(4))
async def test_random_traffic_with_timeouts_and_cancellations_leaves_nothing_held(
    seed: int,
) -> None:
    """Hundreds of requests of three tenants through both tiers; some time out, some are
    cancelled while waiting or holding: at the end both tiers are empty."""
    import random

    from pdserve.router.tenants.gate import TierGates

    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    gates = TierGates.build(lambda: 0.1, lambda: 4.0, loop.time, 0.05, 8)
    tenants = [Tenant("a"), Tenant("b", 3.0), Tenant("c", 1.0, 1)]

    async def one() -> None:
        t = rng.choice(tenants)
        try:
            p = await gates.prefill.enter(t, rng.uniform(0.01, 0.2))
        except AdmissionRejected:
            return
        try:
            d = await gates.decode.enter(t, 1.0)
        except AdmissionRejected:
            p.leave()
            return
        try:
            await asyncio.sleep(rng.uniform(0, 0.01))
            p.leave(rng.uniform(0.005, 0.3) if rng.random() < 0.8 else None)
            await asyncio.sleep(rng.uniform(0, 0.02))
        finally:
            p.leave()
            d.leave()

    tasks = [asyncio.create_task(one()) for _ in range(300)]
    for task in tasks[::7]:
        await asyncio.sleep(0.001)
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert gates.decode is not None
    for g in (gates.prefill, gates.decode):
        assert g.queue.running_cost == 0.0 and g.queue.num_running == 0
        assert g.queue.num_waiting == 0
