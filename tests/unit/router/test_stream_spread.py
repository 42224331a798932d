"""A burst of requests placed between two refreshes of the engines' stats spreads over the decode
replicas by the streams this router already has open there, not all onto the lowest id."""

from __future__ import annotations

from collections import Counter

from pdserve.router.policy.state import with_open_streams
from pdserve.router.policy.types import ReplicaSnapshot
from tests.unit.router.fakes import placer


def _prompt(i: int) -> list[int]:
    return list(range(10_000 * (i + 1), 10_000 * (i + 1) + 300))  # no shared blocks


def test_a_burst_between_stats_refreshes_spreads_over_idle_decode_replicas() -> None:
    p = placer(decode_replicas=("d0", "d1"))  # fixed stats: both report idle throughout
    picks = [p.place(f"r{i}", _prompt(i), 0, None) for i in range(6)]
    assert Counter(d.decode_replica_id for d in picks if d is not None) == {"d0": 3, "d1": 3}


def test_finished_streams_free_their_replica_for_the_next_request() -> None:
    p = placer(decode_replicas=("d0", "d1"))
    for i in range(4):
        p.place(f"r{i}", _prompt(i), 0, None)  # two each: r0, r2 on d0; r1, r3 on d1
    p.decode_done("r0")
    p.decode_done("r2")
    d = p.place("r9", _prompt(9), 0, None)
    assert d is not None and d.decode_replica_id == "d0"
    assert (p.open_streams("d0"), p.open_streams("d1")) == (1, 2)


def test_the_engines_own_count_stands_when_it_is_higher() -> None:
    snap = ReplicaSnapshot("d0", "decode", num_running_requests=5, num_waiting_requests=1,
                           kv_cache_usage=0.1, queued_prefill_tokens=0)  # fmt: skip
    short = ReplicaSnapshot("d1", "decode", num_running_requests=1, num_waiting_requests=0,
                            kv_cache_usage=0.1, queued_prefill_tokens=0)  # fmt: skip
    out = with_open_streams([snap, short], {"d0": 2, "d1": 4})
    assert (out[0].num_running_requests, out[0].num_waiting_requests) == (5, 1)
    assert (out[1].num_running_requests, out[1].num_waiting_requests) == (1, 3)
