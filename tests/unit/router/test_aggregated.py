"""An aggregated deployment's router (no prefill pool): readiness counts only the decode pool,
every request prefills on its decode replica, nothing is sent to a prefill pool."""

from __future__ import annotations

from pdserve.config import RouterConfig
from pdserve.router.placement import Placer
from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.replica_view import ReplicaView
from pdserve.router.status import ClusterStatus
from tests.unit.router.fakes import BLOCK_TOKENS, FakeDispatcher, FixedSource, StepClock
from tests.unit.router.rig import LONG, Rig, drain, prepared


def aggregated_placer(decode: FixedSource) -> Placer:
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0, pools=("decode",))
    view.attach("decode", decode)
    return Placer(
        PolicyConfig(block_size_tokens=BLOCK_TOKENS),
        view,
        StepClock(1000.0),
        policy="pdserve",
        aggregated=True,
    )


async def test_a_long_prompt_prefills_on_its_decode_replica() -> None:
    the_placer = aggregated_placer(FixedSource(["d0", "d1"]))
    r = Rig(FakeDispatcher(), the_placer)
    r.orchestrator = type(r.orchestrator)(
        RouterConfig(), r.dispatcher, the_placer, clock=StepClock(), aggregated=True
    )
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG), obs, None)
    assert len(await drain(gen.chunks)) == 3
    assert r.dispatcher.prefills == []  # no prefill pool was called
    [dec] = r.dispatcher.decodes
    assert dec.handoff is None and dec.target_replica_id in {"d0", "d1"}
    assert obs.decision is not None and obs.decision.reason.startswith("aggregated:")


async def test_before_the_view_is_ready_requests_still_prefill_locally() -> None:
    """The first requests after start-up are placed by load alone: never on a prefill pool."""
    r = Rig(FakeDispatcher(), None)
    r.orchestrator = type(r.orchestrator)(
        RouterConfig(), r.dispatcher, None, clock=StepClock(), aggregated=True
    )
    gen = await r.orchestrator.run(prepared(LONG), r.start(), None)
    await drain(gen.chunks)
    assert r.dispatcher.prefills == [] and r.dispatcher.decodes[0].handoff is None


async def test_ready_needs_only_the_decode_pool() -> None:
    decode = FixedSource(["d0"])
    the_placer = aggregated_placer(decode)
    status = ClusterStatus(the_placer, FakeDispatcher())
    ok, body = await status.readiness()
    assert ok and body["pools"] == {"decode": True}
    decode.replicas().clear()
    ok, body = await status.readiness()
    assert not ok and body["pools"] == {"decode": False}
