"""The engines' own prefill queues, as their routing stats report them, drive a router that has
sent nothing itself: placement by predicted time to first token, and the prefill-backlog 429."""

from __future__ import annotations

from typing import Any

import pytest

from pdserve.config import AdmissionConfig
from pdserve.router.admission import AdmissionRejected
from pdserve.router.placement import Placer
from pdserve.router.policy import PolicyConfig, PrefixIndex
from pdserve.router.replica_view import ReplicaView
from tests.unit.router.fakes import BLOCK_TOKENS, FixedSource, StepClock


class QueuedSource(FixedSource):
    """Replicas whose engines report a prefill queue (other routers' work)."""

    def __init__(self, queued: dict[str, tuple[int, int]]):
        super().__init__(list(queued))
        for rid, stats in self._replicas:
            tokens, prompts = queued[rid]
            stats.update(queued_prefill_tokens=tokens, num_queued_prefills=prompts)


def _placer(prefill: dict[str, tuple[int, int]], **admission: Any) -> Placer:
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    view.attach("prefill", QueuedSource(prefill))
    view.attach("decode", FixedSource(["d0"]))
    config = PolicyConfig(block_size_tokens=BLOCK_TOKENS, spill_max_decode_prefill_s=0)
    return Placer(config, view, StepClock(1000.0), policy="pdserve",
                  admission=AdmissionConfig(**admission))  # fmt: skip


def test_a_replica_busy_with_another_routers_work_is_avoided() -> None:
    placer = _placer({"p0": (30_000, 10), "p1": (0, 0)})  # p0: ~3 s queued elsewhere
    d = placer.place("r1", list(range(600)), 0, None)
    assert d is not None and d.prefill_replica_id == "p1"
    assert d.predicted_ttft_s["p0"] > 3.0 > d.predicted_ttft_s["p1"]


def test_the_engines_queue_past_the_bound_is_a_429_though_this_router_sent_nothing() -> None:
    placer = _placer({"p0": (30_000, 10)}, max_prefill_backlog_seconds=2.0)
    with pytest.raises(AdmissionRejected) as err:
        placer.place("r1", list(range(600)), 0, None)
    assert err.value.reason == "prefill_backlog" and "p0" in err.value.message
