"""The Ray Serve adapter: Serve's own AutoscalingConfig accepts what pdserve builds and resolves
pdserve's policy class; the policy reads the replicas' reported signals from the context."""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import pytest
from ray.serve.config import AutoscalingConfig as ServeAutoscalingConfig

from pdserve.autoscaling.journal import PoolScaling
from pdserve.autoscaling.serve_policy import ITL_S, KV_USAGE, QUEUED_PREFILL_S, PoolPolicy
from pdserve.config import PdserveConfig

app = importlib.import_module("pdserve.deploy.app")


def _ctx(metrics: dict[str, dict[Any, float]], current: int, target: int) -> Any:
    return SimpleNamespace(
        app_name="pdserve",
        aggregated_metrics=metrics,
        current_num_replicas=current,
        target_num_replicas=target,
        capacity_adjusted_min_replicas=1,
        capacity_adjusted_max_replicas=8,
    )


def test_serve_accepts_the_slo_policy_with_each_pools_targets() -> None:
    cfg = PdserveConfig.model_validate(
        {
            "prefill": {"autoscaling": {"max_replicas": 3, "target_ttft_seconds": 0.5}},
            "decode": {"autoscaling": {"max_replicas": 2, "target_itl_seconds": 0.05}},
        }
    )
    pre = ServeAutoscalingConfig(**app.autoscaling_options(cfg.prefill.autoscaling, cfg.prefill,
                                                           "prefill"))  # fmt: skip
    dec = ServeAutoscalingConfig(**app.autoscaling_options(cfg.decode.autoscaling, cfg.decode,
                                                           "decode"))  # fmt: skip
    assert pre.policy.get_policy() is PoolPolicy  # resolved by Serve itself
    assert pre.policy.policy_kwargs == {
        "pool": "prefill", "down_fraction": 0.5, "target_ttft_seconds": 0.5,
    }  # fmt: skip
    assert dec.policy.policy_kwargs == {
        "pool": "decode", "down_fraction": 0.5, "target_itl_seconds": 0.05,
        "target_kv_usage": 0.8,
    }  # fmt: skip
    assert (pre.max_replicas, pre.metrics_interval_s, pre.look_back_period_s) == (3, 2.0, 10.0)
    assert PoolPolicy(**pre.policy.policy_kwargs).pool == "prefill"


def test_ongoing_requests_keeps_serves_default_policy() -> None:
    cfg = PdserveConfig.model_validate(
        {"decode": {"autoscaling": {"max_replicas": 2, "policy": "ongoing_requests",
                                    "target_ongoing_requests": 4}}}
    )  # fmt: skip
    opts = app.autoscaling_options(cfg.decode.autoscaling, cfg.decode, "decode")
    serve_cfg = ServeAutoscalingConfig(**opts)
    assert serve_cfg.policy.is_default_policy_function()
    assert serve_cfg.target_ongoing_requests == 4


def test_a_target_on_the_wrong_pool_is_refused() -> None:
    with pytest.raises(ValueError, match="target_itl_seconds apply only to the decode pool"):
        PdserveConfig.model_validate({"prefill": {"autoscaling": {"target_itl_seconds": 0.2}}})


def test_prefill_policy_reads_each_replicas_queued_seconds() -> None:
    policy = PoolPolicy("prefill", target_ttft_seconds=1.0)
    n, state = policy(_ctx({QUEUED_PREFILL_S: {"r1": 1.8, "r2": 1.4}}, current=2, target=2))
    assert n == 4 and state["pdserve_direction"] == "up"
    assert "1.60 s per replica" in state["pdserve_reason"]


def test_decode_policy_reads_kv_usage_and_itl() -> None:
    policy = PoolPolicy("decode", target_itl_seconds=0.1, target_kv_usage=0.8)
    n, state = policy(_ctx({KV_USAGE: {"r1": 0.3}, ITL_S: {"r1": 0.15}}, current=1, target=1))
    assert n == 2 and "ITL 150 ms > target 100 ms" in state["pdserve_reason"]
    n, _ = policy(_ctx({KV_USAGE: {"r1": 0.1, "r2": 0.1}, ITL_S: {"r1": 0.01}}, 2, 2))
    assert n == 1


def test_a_failing_policy_holds_the_current_target() -> None:
    policy = PoolPolicy("prefill")
    broken = _ctx({QUEUED_PREFILL_S: {"r1": "not a number"}}, current=2, target=3)  # type: ignore[dict-item]
    assert policy(broken) == (3, {})


def test_an_unknown_pool_is_refused() -> None:
    with pytest.raises(ValueError, match="prefill or decode"):
        PoolPolicy("embed")


def test_a_config_with_both_pools_autoscaling_survives_the_trip_to_the_replicas() -> None:
    # The replicas re-validate the config from its JSON dump (every default written out).
    cfg = PdserveConfig.model_validate(
        {"prefill": {"autoscaling": {"max_replicas": 2}},
         "decode": {"autoscaling": {"max_replicas": 2, "target_kv_usage": 0.6}}}
    )  # fmt: skip
    again = PdserveConfig.model_validate(cfg.model_dump(mode="json"))
    assert again == cfg
    assert again.decode.autoscaling is not None
    assert again.decode.autoscaling.slo_targets("decode") == {
        "target_itl_seconds": 0.1, "target_kv_usage": 0.6,
    }  # fmt: skip


def test_the_policy_publishes_its_state_and_each_scale_event_with_its_reason() -> None:
    policy = PoolPolicy("prefill", target_ttft_seconds=1.0)
    published: list[tuple[str, PoolScaling]] = []
    clock = iter(100 + t / 10 for t in range(100))  # 0.1 s per tick
    policy._publish = lambda app, doc: published.append((app, doc))
    policy._now = lambda: next(clock)
    busy = {QUEUED_PREFILL_S: {"r1": 2.5}}
    policy(_ctx(busy, current=1, target=1))  # wants 3; Serve's delay holds the target at 1
    policy(_ctx(busy, current=1, target=1))  # nothing changed within a second: not published
    policy(_ctx(busy, current=1, target=2))  # Serve raised its target: a scale event
    assert [app for app, _ in published] == ["pdserve", "pdserve"]
    first, last = published[0][1], published[1][1]
    assert (first.target_replicas, first.wanted_replicas, first.events) == (1, 3, ())
    assert (first.signal, first.signal_target) == (2.5, 1.0)
    [event] = last.events
    assert (event.from_replicas, event.to_replicas) == (1, 2)
    assert "queued prefill 2.50 s per replica > target 1 s" in event.reason


def test_a_failing_store_never_stops_scaling() -> None:
    policy = PoolPolicy("prefill", target_ttft_seconds=1.0)

    def broken(app: str, doc: PoolScaling) -> None:
        raise ConnectionError("GCS unreachable")

    policy._publish = broken
    assert policy(_ctx({QUEUED_PREFILL_S: {"r1": 2.5}}, current=1, target=1))[0] == 3


def test_holding_keeps_serves_target_while_a_new_replica_starts() -> None:
    """Serve aims for 2, one runs (the second is starting); the load per running replica is in
    the hold band: the policy must vote 2, not 1, or Serve would cancel the scale-up."""
    policy = PoolPolicy("decode", target_kv_usage=0.4, target_itl_seconds=0.2)
    n, state = policy(_ctx({KV_USAGE: {"r1": 0.34}, ITL_S: {"r1": 0.02}}, current=1, target=2))
    assert (n, state["pdserve_direction"]) == (2, "hold")
