"""Engine thread pinning (pure: fake affinity calls) and the replica's core list."""

from __future__ import annotations

import os

import pytest

from pdserve.config import PdserveConfig
from pdserve.engine.pinning import pin_engine_threads
from pdserve.kv_transfer.connector_config import replica_cores


def test_threads_reaching_outside_the_cores_are_moved_and_the_others_kept() -> None:
    affinity = {10: {0, 1}, 11: {1}, 12: {0}, 13: {0, 1, 2, 3}}  # 11: an OpenMP thread on 1
    moved = pin_engine_threads([10, 11, 12, 13], {1}, affinity.__getitem__, affinity.__setitem__)
    assert moved == 3
    assert affinity == {10: {1}, 11: {1}, 12: {1}, 13: {1}}


def test_a_thread_that_exits_meanwhile_is_skipped() -> None:
    def get(tid: int) -> set[int]:
        if tid == 2:
            raise ProcessLookupError(tid)
        return {0, 1}

    pinned: dict[int, set[int]] = {}
    assert pin_engine_threads([1, 2, 3], {0}, get, pinned.__setitem__) == 2
    assert pinned == {1: {0}, 3: {0}}


def test_no_cores_is_an_error() -> None:
    with pytest.raises(ValueError, match="no cores"):
        pin_engine_threads([1], set())


def test_pins_a_real_thread_of_this_process() -> None:
    """The real calls on this test's own thread: pinned to one of its cores and back."""
    tid = os.getpid()
    before = os.sched_getaffinity(tid)
    one = {min(before)}
    try:
        assert pin_engine_threads([tid], one) == (1 if len(before) > 1 else 0)
        assert os.sched_getaffinity(tid) == one
    finally:
        os.sched_setaffinity(tid, before)


def _config(**pool: object) -> PdserveConfig:
    return PdserveConfig.model_validate({"platform": "cpu", "decode": pool})


def test_replica_cores_per_pool_per_replica_and_off_cpu() -> None:
    assert replica_cores(_config(cpu_cores=[1]), "decode") == [1]
    per_replica = _config(cpu_cores_per_replica=[[0], [1]])
    assert [replica_cores(per_replica, "decode", rank) for rank in (0, 1, 2)] == [[0], [1], [0]]
    assert replica_cores(_config(), "decode") is None
    gpu = _config(cpu_cores=[1]).model_copy(update={"platform": "cuda"})
    assert replica_cores(gpu, "decode") is None
    assert _config().decode.pin_engine_core is True
