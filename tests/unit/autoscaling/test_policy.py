"""The pools' scaling decisions over recorded signal sequences: scale up, hold, scale down,
and no flapping when the signal is noisy around a level."""

from __future__ import annotations

import itertools
import random

import pytest

from pdserve.autoscaling.policy import decode_replicas, prefill_replicas


def _run_prefill(load_s: list[float], start: int = 1, target_s: float = 1.0) -> list[int]:
    """Replay a recorded pool load (total queued prefill seconds per tick, spread evenly over
    the replicas running) and apply each decision at once (no delays)."""
    n, out = start, []
    for load in load_s:
        n = prefill_replicas([load / n] * n, n, target_s).replicas
        out.append(n)
    return out


def test_prefill_scales_up_to_keep_the_wait_per_replica_under_the_target() -> None:
    d = prefill_replicas([2.5], current=1, target_ttft_s=1.0)
    assert (d.replicas, d.direction) == (3, "up")
    assert d.signal == pytest.approx(2.5) and d.target == 1.0
    assert "2.50 s per replica > target 1 s: 1 -> 3" in d.reason


def test_prefill_holds_between_the_target_and_the_down_margin() -> None:
    # 2 replicas, 0.6 s each: under the target; with one fewer 1.2 s > 0.5 x 1 s: hold.
    d = prefill_replicas([0.6, 0.6], current=2, target_ttft_s=1.0)
    assert (d.replicas, d.direction) == (2, "hold")


def test_prefill_scales_down_only_with_margin() -> None:
    d = prefill_replicas([0.2, 0.2], current=2, target_ttft_s=1.0)
    assert (d.replicas, d.direction) == (1, "down")
    assert prefill_replicas([0.0], current=1, target_ttft_s=1.0).replicas == 1  # never below 1


def test_prefill_extrapolates_replicas_that_have_not_reported_yet() -> None:
    # 3 running, 2 reported 1.5 s each: the pool's load counts 3 x 1.5 s.
    d = prefill_replicas([1.5, 1.5], current=3, target_ttft_s=1.0)
    assert d.replicas == 5


def test_no_reports_hold() -> None:
    assert prefill_replicas([], current=2, target_ttft_s=1.0).direction == "hold"
    assert decode_replicas([], [], 2, 0.8, 0.1).direction == "hold"


def test_a_recorded_prefill_ramp_scales_up_then_back_down() -> None:
    load = [0.2] * 5 + [1.5, 2.8, 3.5, 3.6, 3.4] + [3.5] * 5 + [1.0, 0.6, 0.3, 0.1] + [0.0] * 5
    replicas = _run_prefill(load)
    assert replicas[:5] == [1] * 5
    assert max(replicas) == 4 and replicas[9] == 4  # 3.6 s of load at 1 s per replica
    assert replicas[-1] == 1
    ups = [i for i in range(1, len(replicas)) if replicas[i] > replicas[i - 1]]
    downs = [i for i in range(1, len(replicas)) if replicas[i] < replicas[i - 1]]
    assert max(ups) < min(downs), f"went up again after going down: {replicas}"


def test_noise_around_a_level_does_not_flap() -> None:
    rng = random.Random(7)
    load = [2.0 * (1 + rng.uniform(-0.3, 0.3)) for _ in range(200)]  # 2 s +-30 %
    replicas = _run_prefill(load, start=2)
    changes = sum(a != b for a, b in itertools.pairwise(replicas))
    assert changes <= 1, f"flapped {changes} times: {replicas}"
    assert set(replicas[-100:]) == {replicas[-1]} and replicas[-1] in (2, 3)


def test_decode_scales_up_on_kv_usage() -> None:
    d = decode_replicas([0.95], [0.02], current=1, target_kv_usage=0.7, target_itl_s=0.1)
    assert (d.replicas, d.direction) == (2, "up")
    assert "KV usage 0.95 per replica > target 0.7" in d.reason


def test_decode_scales_up_on_itl_even_with_kv_to_spare() -> None:
    d = decode_replicas([0.2, 0.1], [0.05, 0.25], current=2, target_kv_usage=0.8,
                        target_itl_s=0.1)  # fmt: skip
    assert (d.replicas, d.direction) == (3, "up")
    assert "ITL 250 ms > target 100 ms" in d.reason


def test_decode_scales_down_only_when_both_signals_have_margin() -> None:
    low = decode_replicas([0.1, 0.1], [0.02, 0.03], 2, target_kv_usage=0.8, target_itl_s=0.1)
    assert (low.replicas, low.direction) == (1, "down")
    slow = decode_replicas([0.1, 0.1], [0.07, 0.03], 2, target_kv_usage=0.8, target_itl_s=0.1)
    assert slow.direction == "hold"  # KV would fit on one, but ITL is past half its target
    full = decode_replicas([0.5, 0.5], [], 2, target_kv_usage=0.8, target_itl_s=0.1)
    assert full.direction == "hold"  # 1.0 of KV on one replica > 0.4


@pytest.mark.parametrize("target", [0.0, -1.0])
def test_a_non_positive_target_is_refused(target: float) -> None:
    with pytest.raises(ValueError, match="target must be > 0"):
        prefill_replicas([1.0], 1, target)
