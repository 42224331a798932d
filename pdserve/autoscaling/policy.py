"""How many replicas a pool wants, from the signals its replicas report (pure).

Each pool scales on its own SLO signal, not on request counts:

- **prefill**: each replica reports its queued prefill work in cost-model seconds (the wait
  a new prompt would see there: the predicted time to first token minus its own prefill).
  The pool's load is their sum; it wants the fewest replicas that keep the per-replica wait
  at or under `target_ttft_s`: ceil(load / target_ttft_s).
- **decode**: each replica reports its KV-cache usage (0-1) and its recent inter-token
  latency. It wants enough replicas to hold the pool's KV at `target_kv_usage`
  (ceil(sum of usage / target_kv_usage)) and one more than now while any replica's ITL is
  over `target_itl_s`.

Scaling down needs margin (hysteresis): one replica fewer only when the pool would still sit
at or under `down_fraction` of each target with one replica fewer. Between the two it holds.
Ray Serve's wrapper then applies the pool's delays (a change must be wanted for
`upscale_delay_s` / `downscale_delay_s` in a row), scaling factors and min/max bounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Direction = Literal["up", "hold", "down"]


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """What a pool wants. `signal`: the pool's per-replica signal value now (seconds of queued
    prefill per replica; decode: the KV usage per replica), `target` its target, and
    `reason` one line for the log and `pdserve top`."""

    replicas: int
    direction: Direction
    signal: float
    target: float
    reason: str


def prefill_replicas(
    waits_s: Sequence[float], current: int, target_ttft_s: float, down_fraction: float = 0.5
) -> ScaleDecision:
    """The prefill pool's wanted replica count.

    `waits_s`: per running replica, its queued prefill work in seconds (time-averaged by Ray
    Serve over the look-back window). `current`: running replicas (>= 1 counts; with no
    reports yet the pool holds). Raises ValueError for a non-positive target.
    """
    _check(target_ttft_s, down_fraction)
    if current < 1 or not waits_s:
        return ScaleDecision(current, "hold", 0.0, target_ttft_s, "no reports yet: hold")
    load_s = sum(max(0.0, w) for w in waits_s) * current / len(waits_s)
    per_replica = load_s / current
    need = max(1, math.ceil(load_s / target_ttft_s - 1e-9))
    if need > current:
        return ScaleDecision(
            need,
            "up",
            per_replica,
            target_ttft_s,
            f"queued prefill {per_replica:.2f} s per replica > target {target_ttft_s:g} s: "
            f"{current} -> {need}",
        )
    if current > 1 and load_s / (current - 1) <= down_fraction * target_ttft_s:
        return ScaleDecision(
            current - 1,
            "down",
            per_replica,
            target_ttft_s,
            f"queued prefill {load_s / (current - 1):.2f} s per replica with one fewer <= "
            f"{down_fraction:g} x target: {current} -> {current - 1}",
        )
    return ScaleDecision(
        current,
        "hold",
        per_replica,
        target_ttft_s,
        f"queued prefill {per_replica:.2f} s per replica, target {target_ttft_s:g} s: hold",
    )


def decode_replicas(
    kv_usage: Sequence[float],
    itl_s: Sequence[float],
    current: int,
    target_kv_usage: float,
    target_itl_s: float,
    down_fraction: float = 0.5,
) -> ScaleDecision:
    """The decode pool's wanted replica count.

    `kv_usage`: per running replica, its KV-cache usage 0-1; `itl_s`: per running replica
    that streamed tokens recently, its inter-token latency in seconds (an idle replica
    reports none). Both time-averaged by Ray Serve over the look-back window. Raises
    ValueError for a non-positive target.
    """
    _check(target_kv_usage, down_fraction)
    _check(target_itl_s, down_fraction)
    if current < 1 or not kv_usage:
        return ScaleDecision(current, "hold", 0.0, target_kv_usage, "no reports yet: hold")
    kv_total = sum(min(1.0, max(0.0, u)) for u in kv_usage) * current / len(kv_usage)
    per_replica = kv_total / current
    worst_itl = max(itl_s, default=0.0)
    need = max(1, math.ceil(kv_total / target_kv_usage - 1e-9))
    if worst_itl > target_itl_s:
        need = max(need, current + 1)
    if need > current:
        why = (
            f"ITL {worst_itl * 1000:.0f} ms > target {target_itl_s * 1000:.0f} ms"
            if worst_itl > target_itl_s
            else f"KV usage {per_replica:.2f} per replica > target {target_kv_usage:g}"
        )
        return ScaleDecision(
            need, "up", per_replica, target_kv_usage, f"{why}: {current} -> {need}"
        )
    if (
        current > 1
        and kv_total / (current - 1) <= down_fraction * target_kv_usage
        and worst_itl <= down_fraction * target_itl_s
    ):
        return ScaleDecision(
            current - 1,
            "down",
            per_replica,
            target_kv_usage,
            f"KV usage {kv_total / (current - 1):.2f} per replica with one fewer and ITL "
            f"{worst_itl * 1000:.0f} ms <= {down_fraction:g} x targets: {current} -> "
            f"{current - 1}",
        )
    return ScaleDecision(
        current,
        "hold",
        per_replica,
        target_kv_usage,
        f"KV usage {per_replica:.2f} per replica (target {target_kv_usage:g}), ITL "
        f"{worst_itl * 1000:.0f} ms (target {target_itl_s * 1000:.0f} ms): hold",
    )


def _check(target: float, down_fraction: float) -> None:
    if not target > 0:
        raise ValueError(f"autoscaling target must be > 0, got {target}")
    if not 0 < down_fraction < 1:
        raise ValueError(f"down_fraction must be in (0, 1), got {down_fraction}")
