"""The pools' autoscaling policies as Ray Serve sees them (thin adapter over `policy`).

`PoolPolicy` is a class-based Ray Serve `policy_function`: Serve's controller builds one per
deployment with the pool's `policy_kwargs` and calls it every control-loop tick (~0.1 s) with
an `AutoscalingContext`. It reads what each running replica reported from its
`record_autoscaling_stats` (`ctx.aggregated_metrics[name][replica_id]`, time-averaged by
Serve over `look_back_period_s`) and returns the replica count the pure policy wants; Serve
then applies the delays, scaling factors and min/max bounds. A scale decision is logged (in
the Serve controller's log) once per change of direction or count, with its reason, and
exported as gauges through Ray's metrics export (`pdserve_pool_*`, which Ray exports as
`ray_pdserve_pool_*`, one series per pool).

Signals each pool's replicas report (names shared with `pdserve.engine.server`):
prefill `QUEUED_PREFILL_S`; decode `KV_USAGE` and `ITL_S`.
"""

from __future__ import annotations

import logging
from typing import Any

from pdserve.autoscaling.policy import ScaleDecision, decode_replicas, prefill_replicas
from pdserve.router.policy.types import POOLS

QUEUED_PREFILL_S = "pdserve_queued_prefill_s"
"""Prefill replica: its queued prefill work in cost-model seconds."""
KV_USAGE = "pdserve_kv_cache_usage"
"""Decode replica: its KV-cache usage, 0-1."""
ITL_S = "pdserve_itl_s"
"""Decode replica: mean inter-token latency of the tokens it generated since its last
report (0 when it generated none)."""

log = logging.getLogger("ray.serve")


class PoolPolicy:
    """One pool's policy. Constructed by Ray Serve from `policy_kwargs` (JSON values)."""

    def __init__(
        self,
        pool: str,
        target_ttft_seconds: float = 1.0,
        target_itl_seconds: float = 0.1,
        target_kv_usage: float = 0.8,
        down_fraction: float = 0.5,
    ) -> None:
        if pool not in POOLS:
            raise ValueError(f"pool must be prefill or decode, got {pool!r}")
        self.pool = pool
        self._ttft_s = target_ttft_seconds
        self._itl_s = target_itl_seconds
        self._kv = target_kv_usage
        self._down = down_fraction
        self._last: tuple[str, int] | None = None
        self._gauges: Any = None

    def decide(self, metrics: dict[str, dict[Any, float]], current: int) -> ScaleDecision:
        """The pure decision from Serve's aggregated per-replica metrics."""
        if self.pool == "prefill":
            waits = list(metrics.get(QUEUED_PREFILL_S, {}).values())
            return prefill_replicas(waits, current, self._ttft_s, self._down)
        kv = list(metrics.get(KV_USAGE, {}).values())
        itl = list(metrics.get(ITL_S, {}).values())
        return decode_replicas(kv, itl, current, self._kv, self._itl_s, self._down)

    def __call__(self, ctx: Any) -> tuple[int, dict[str, Any]]:
        """Ray Serve's entry point. Never raises: an exception here would stall the
        controller's update of every application, so a failure holds the current target."""
        try:
            decision = self.decide(ctx.aggregated_metrics or {}, ctx.current_num_replicas)
        except Exception:
            log.exception("pdserve %s autoscaling policy failed; holding", self.pool)
            return ctx.target_num_replicas, {}
        bounds = (ctx.capacity_adjusted_min_replicas, ctx.capacity_adjusted_max_replicas)
        self._report(decision, ctx.target_num_replicas, bounds)
        state = {
            "pdserve_wanted": decision.replicas,
            "pdserve_direction": decision.direction,
            "pdserve_reason": decision.reason,
        }
        return decision.replicas, state

    def _report(self, decision: ScaleDecision, target: int, bounds: tuple[int, int]) -> None:
        """Log a decision that changes what Serve will do (direction, or the count within the
        pool's bounds); set the gauges."""
        clipped = min(max(decision.replicas, bounds[0]), bounds[1])
        key = (decision.direction, clipped)
        if decision.direction != "hold" and clipped != target and key != self._last:
            log.info("pdserve autoscaling %s: %s", self.pool, decision.reason)
        self._last = key
        try:
            gauges = self._gauges or self._make_gauges()
            tags = {"pool": self.pool}
            gauges[0].set(target, tags=tags)
            gauges[1].set(decision.replicas, tags=tags)
            gauges[2].set(decision.signal, tags=tags)
            gauges[3].set(decision.target, tags=tags)
        except Exception:  # metrics are best effort: never block scaling on them
            log.debug("pdserve autoscaling gauges unavailable", exc_info=True)

    def _make_gauges(self) -> tuple[Any, ...]:
        from ray.util.metrics import Gauge

        keys = ("pool",)
        self._gauges = (
            Gauge("pdserve_pool_target_replicas", "Replicas Ray Serve aims for.", keys),
            Gauge("pdserve_pool_wanted_replicas", "Replicas the pool's policy wants now.", keys),
            Gauge(
                "pdserve_pool_scaling_signal",
                "The pool's scaling signal per replica (prefill: queued prefill seconds; "
                "decode: KV-cache usage).",
                keys,
            ),
            Gauge("pdserve_pool_scaling_target", "The scaling signal's target.", keys),
        )
        return tuple(self._gauges)
