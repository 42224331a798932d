"""The decode engine's ITL-budget scheduler (pdserve/engine/itl_scheduler.py): the per-step
chunk cap, the stall records and where they go, and which engines get it. The real engine runs
it in the integration tests (tests/integration/test_timeline.py reads the stall histogram)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from vllm.v1.request import RequestStatus

from pdserve.config import PdserveConfig
from pdserve.engine.args import engine_args
from pdserve.engine.itl_scheduler import _ItlBudget
from pdserve.engine.stats import EngineCounters
from pdserve.itl_budget import STALL_KEY, ItlSettings, chunk_tokens
from pdserve.router.policy import CostModel

COST = CostModel(per_token_s=1e-4, per_token_sq_s=0.0, decode_base_s=0.005, decode_per_seq_s=0.001)


def _req(prompt: int, computed: int, status: Any = RequestStatus.RUNNING) -> SimpleNamespace:
    return SimpleNamespace(num_prompt_tokens=prompt, num_computed_tokens=computed, status=status)


def _scheduler(running: list[Any], waiting: list[Any], configured: int = 512) -> _ItlBudget:
    s = _ItlBudget.__new__(_ItlBudget)
    s.running, s.waiting = running, waiting
    s.scheduler_config = SimpleNamespace(long_prefill_token_threshold=configured)
    s.max_num_scheduled_tokens = 4096
    coefficients = COST.model_dump(include=set(ItlSettings.model_fields))
    settings = ItlSettings(itl_slo_s=0.05, min_chunk_tokens=16, **coefficients)
    s.vllm_config = SimpleNamespace(additional_config=settings.to_config())
    s._itl_init()
    return s


def test_the_cap_is_the_budget_chunk_split_between_the_prompts() -> None:
    streams = [_req(50, 60) for _ in range(10)]  # 15 ms step, 35 ms left: 350 tokens
    one = _scheduler([*streams, _req(3000, 0)], [])
    # The streams' 600 context tokens cost the step 60 us: one token less than without.
    assert one._threshold() == chunk_tokens(COST, 0.05, 10, 0, 4096, 600) == 349
    assert chunk_tokens(COST, 0.05, 10, 0, 4096) == 350
    two = _scheduler([*streams, _req(3000, 700)], [_req(2000, 0)])
    assert two._threshold() == 174
    remote = _scheduler(
        [*streams, _req(3000, 0)], [_req(2000, 0, RequestStatus.WAITING_FOR_REMOTE_KVS)]
    )
    assert remote._threshold() == 349  # a KV pull computes nothing


def test_the_cap_never_exceeds_the_configured_chunk_nor_goes_under_the_minimum() -> None:
    streams = [_req(50, 60) for _ in range(2)]
    assert _scheduler([*streams, _req(3000, 0)], [], configured=128)._threshold() == 128
    crowded = [_req(50, 60) for _ in range(60)]  # the step alone is over the budget
    assert _scheduler([*crowded, _req(3000, 0)], [])._threshold() == 16


def test_without_streams_or_prompts_the_configured_chunk_applies() -> None:
    assert _scheduler([_req(3000, 0)], [_req(100, 0)])._threshold() == 512
    assert _scheduler([_req(50, 60)], [])._threshold() == 512


def test_steps_with_prefill_next_to_streams_are_recorded_and_reach_the_histogram() -> None:
    s = _scheduler([], [])
    s._after_schedule(SimpleNamespace(num_scheduled_tokens={"a": 1, "b": 1, "c": 300}))
    s._after_schedule(SimpleNamespace(num_scheduled_tokens={"a": 1, "b": 1}))  # decode only
    s._before_update()
    s._before_update()
    assert len(s._stalls) == 1 and s._stalls[0][1] == 2
    s.connector = None
    stats = s._with_stalls(SimpleNamespace(kv_connector_stats=None))
    (record,) = stats.kv_connector_stats[STALL_KEY]
    assert record[1] == 2 and 0 <= record[0] < 1
    assert s._stalls == []  # handed over once
    counters = EngineCounters()
    counters.record(
        SimpleNamespace(
            num_running_reqs=3, num_waiting_reqs=0, kv_cache_usage=0.1,
            kv_connector_stats={STALL_KEY: [[0.02, 2], [0.3, 5]]},
        ),
        None,
    )  # fmt: skip
    h = counters.decode_stall_seconds
    assert sum(h.counts) == 7
    assert h.sum == 0.02 * 2 + 0.3 * 5


def test_only_disaggregated_decode_engines_get_the_budget_scheduler() -> None:
    cfg = PdserveConfig()
    decode = engine_args(cfg, "decode", "/m")
    assert decode["scheduler_cls"] == "pdserve.engine.itl_scheduler.ItlBudgetScheduler"
    settings = ItlSettings.from_config(decode["additional_config"])
    assert settings is not None and settings.itl_slo_s == cfg.router.routing.itl_slo_s
    assert "scheduler_cls" not in engine_args(cfg, "prefill", "/m")
    off = PdserveConfig.model_validate({"router": {"routing": {"itl_slo_s": None}}})
    assert "scheduler_cls" not in engine_args(off, "decode", "/m")
    agg = PdserveConfig.model_validate({"mode": "aggregated"})
    assert "scheduler_cls" not in engine_args(agg, "decode", "/m")


def test_a_connectors_stat_logger_gets_its_own_keys_beside_the_stall_records() -> None:
    """vLLM's NIXL stat logger reads its keys from every payload: a step without NIXL stats
    must still carry them (empty), or the replica's output loop fails."""

    class Connector:
        @classmethod
        def build_kv_connector_stats(cls) -> Any:
            return SimpleNamespace(to_dict=lambda: {"transfer_duration": []})

    s = _scheduler([], [])
    s.connector = Connector()
    s._stalls = [[0.01, 3]]
    stats = s._with_stalls(SimpleNamespace(kv_connector_stats=None))
    assert stats.kv_connector_stats == {"transfer_duration": [], STALL_KEY: [[0.01, 3]]}
