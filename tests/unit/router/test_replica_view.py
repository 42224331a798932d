"""The router's replica view: health from routing stats, and forgetting what a dead replica held."""

from __future__ import annotations

import pytest

from pdserve.router.placement import Placer
from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.policy.types import NoReplicaError
from pdserve.router.replica_view import ReplicaView
from tests.unit.router.fakes import BLOCK_TOKENS, FixedSource


def test_a_replica_whose_engine_died_is_unhealthy_and_its_blocks_forgotten() -> None:
    prefill = FixedSource(["p0", "p1"])
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    view.attach("prefill", prefill)
    view.attach("decode", FixedSource(["d0"]))
    view.refresh()
    view.index.on_routed("p0", [11, 12, 13])
    view.index.on_routed("p1", [11, 12])
    assert view.index.num_tracked_blocks("p0") == 3

    stats = prefill.replicas()[0][1]
    stats.clear()  # no news (Ray has not polled p0 since it rebuilt its list): still healthy
    view.refresh()
    assert all(s.healthy for s in view.snapshots("prefill"))
    stats["healthy"] = False  # p0's engine died: its replica says so
    view.refresh()
    health = {s.replica_id: s.healthy for s in view.snapshots("prefill")}
    assert health == {"p0": False, "p1": True}
    assert view.index.num_tracked_blocks("p0") == 0
    assert view.index.num_tracked_blocks("p1") == 2  # the healthy one keeps its blocks
    view.refresh()  # forgetting again is harmless
    assert view.index.num_tracked_blocks("p1") == 2


def test_a_replica_that_never_reported_is_unhealthy() -> None:
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    view.attach("prefill", FixedSource(["p0"], healthy=False))
    view.attach("decode", FixedSource(["d0"]))
    view.refresh()
    assert not view.snapshots("prefill")[0].healthy and view.snapshots("decode")[0].healthy


def test_a_pool_that_lost_every_replica_is_a_503_not_a_wait() -> None:
    decode = FixedSource(["d0"])
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    view.attach("prefill", FixedSource(["p0"]))
    assert view.emptied_pool() is None  # start-up: not attached, never ready
    view.attach("decode", decode)
    placer = Placer(PolicyConfig(block_size_tokens=BLOCK_TOKENS), view, policy="pdserve")
    assert placer.place("r1", list(range(100)), 0, None) is not None
    decode.replicas().clear()  # the only decode replica was stopped; its replacement starts
    with pytest.raises(NoReplicaError) as err:
        placer.place("r2", list(range(100)), 0, None)
    assert err.value.pool == "decode"


def test_a_replica_removed_by_a_scale_down_gets_no_new_work_and_its_blocks_are_forgotten() -> None:
    """Ray Serve takes a replica it scales down out of the routing set at once (it then drains
    what it holds): the router's view drops it, placement never picks it again, even for a
    prompt whose blocks it held, and the prefix index forgets those blocks."""
    decode = FixedSource(["d0", "d1"])
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    view.attach("prefill", FixedSource(["p0"]))
    view.attach("decode", decode)
    placer = Placer(
        PolicyConfig(block_size_tokens=BLOCK_TOKENS, local_prefill_max_cold_tokens=64),
        view,
        policy="pdserve",
    )
    prompt = list(range(BLOCK_TOKENS * 4))
    first = placer.place("r1", prompt, 0, None)
    assert first is not None
    held_by = first.decode_replica_id
    assert view.index.num_tracked_blocks(held_by) > 0
    decode.replicas()[:] = [r for r in decode.replicas() if r[0] != held_by]  # scaled down
    view.refresh()
    assert view.index.num_tracked_blocks(held_by) == 0
    for i in range(5):
        again = placer.place(f"r{i + 2}", prompt, 0, None)
        assert again is not None and again.decode_replica_id != held_by
