"""/ready: ready only when every pool has a replica and the router can place requests."""

from __future__ import annotations

from typing import Any

from pdserve.router.placement import Placer
from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.replica_view import ReplicaView
from pdserve.router.status import ClusterStatus
from tests.unit.router.fakes import BLOCK_TOKENS, FakeDispatcher, FixedSource


class AttachingDispatcher(FakeDispatcher):
    """Pinging the pools attaches their request routers, as Ray Serve does on first use."""

    def __init__(self, view: ReplicaView, sources: dict[str, Any]) -> None:
        super().__init__()
        self.view = view
        self.sources = sources
        self.pings = 0

    async def pools_ready(self, timeout_seconds: float) -> dict[str, bool]:
        self.pings += 1
        for pool, source in self.sources.items():
            self.view.attach(pool, source)
        return {"prefill": True, "decode": True}


def _placer(view: ReplicaView) -> Placer:
    return Placer(PolicyConfig(block_size_tokens=BLOCK_TOKENS), view, policy="pdserve")


async def test_pinging_attaches_the_request_routers_then_the_router_is_ready() -> None:
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    sources = {"prefill": FixedSource(["p0"]), "decode": FixedSource(["d0"])}
    dispatcher = AttachingDispatcher(view, sources)
    status = ClusterStatus(_placer(view), dispatcher)
    assert not view.attached
    ok, body = await status.readiness()
    assert dispatcher.pings == 1
    assert ok and body == {"pools": {"prefill": True, "decode": True}, "placement": True}
    await status.readiness()
    assert dispatcher.pings == 1, "once attached, readiness reads the view and pings no one"


async def test_a_pool_whose_replicas_report_no_routing_stats_is_not_ready() -> None:
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    sources = {"prefill": FixedSource(["p0"]), "decode": FixedSource(["d0"], healthy=False)}
    status = ClusterStatus(_placer(view), AttachingDispatcher(view, sources))
    ok, body = await status.readiness()
    assert not ok and body["pools"] == {"prefill": True, "decode": False}


async def test_a_pool_without_replicas_is_not_ready() -> None:
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    sources = {"prefill": FixedSource([]), "decode": FixedSource(["d0"])}
    status = ClusterStatus(_placer(view), AttachingDispatcher(view, sources))
    ok, body = await status.readiness()
    assert not ok and body["pools"] == {"prefill": False, "decode": True}
