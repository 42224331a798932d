"""The router's replica view: health from routing stats, and forgetting what a dead replica held."""

from __future__ import annotations

from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.replica_view import ReplicaView
from tests.unit.router.fakes import FixedSource


def test_a_replica_that_stops_reporting_is_unhealthy_and_its_blocks_forgotten() -> None:
    prefill = FixedSource(["p0", "p1"])
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    view.attach("prefill", prefill)
    view.attach("decode", FixedSource(["d0"]))
    view.refresh()
    view.index.on_routed("p0", [11, 12, 13])
    view.index.on_routed("p1", [11, 12])
    assert view.index.num_tracked_blocks("p0") == 3

    prefill.replicas()[0][1].clear()  # p0's engine died: its replica reports no stats
    view.refresh()
    health = {s.replica_id: s.healthy for s in view.snapshots("prefill")}
    assert health == {"p0": False, "p1": True}
    assert view.index.num_tracked_blocks("p0") == 0
    assert view.index.num_tracked_blocks("p1") == 2  # the healthy one keeps its blocks
    view.refresh()  # forgetting again is harmless
    assert view.index.num_tracked_blocks("p1") == 2
