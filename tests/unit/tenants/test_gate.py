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
