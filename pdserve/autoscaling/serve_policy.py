"""The pools' autoscaling policies as Ray Serve sees them (thin adapter over `policy`).

`PoolPolicy` is a class-based Ray Serve `policy_function`: Serve's controller builds one per
deployment with the pool's `policy_kwargs` and calls it every control-loop tick (~0.1 s) with
an `AutoscalingContext`. It reads what each running replica reported from its
`record_autoscaling_stats` (`ctx.aggregated_metrics[name][replica_id]`, time-averaged by
Serve over `look_back_period_s`) and returns the replica count the pure policy wants; Serve
then applies the delays, scaling factors and min/max bounds. A decision that would change
the count is logged (in the Serve controller's log) once, with its reason, and so is every
scale event (a change of Serve's target); the pool's state and recent events are published to
Ray's GCS key-value store (`store`), where the routers read them for `/metrics`,
`/v1/pdserve/replicas` and `pdserve top`.

Signals each pool's replicas report (names shared with `pdserve.engine.server`):
prefill `QUEUED_PREFILL_S`; decode `KV_USAGE` and `ITL_S`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pdserve.autoscaling import store
from pdserve.autoscaling.journal import PoolScaling, ScalingJournal
from pdserve.autoscaling.policy import ScaleDecision, decode_replicas, prefill_replicas
from pdserve.names import POOLS, PoolName

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
        self.pool: PoolName = pool
        self._ttft_s = target_ttft_seconds
        self._itl_s = target_itl_seconds
        self._kv = target_kv_usage
        self._down = down_fraction
        self._last: tuple[str, int] | None = None
        self._journal = ScalingJournal(self.pool)
        self._now: Callable[[], float] = time.time
        self._publish: Callable[[str, PoolScaling], None] = store.publish

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
            if decision.direction == "hold":
                # Hold what Serve aims for, not the running count: while a new replica starts
                # (target > running) a vote for the running count would be a vote to cancel it.
                decision = replace(decision, replicas=ctx.target_num_replicas)
        except Exception:
            log.exception("pdserve %s autoscaling policy failed; holding", self.pool)
            return ctx.target_num_replicas, {}
        bounds = (ctx.capacity_adjusted_min_replicas, ctx.capacity_adjusted_max_replicas)
        self._report(ctx, decision, bounds)
        state = {
            "pdserve_wanted": decision.replicas,
            "pdserve_direction": decision.direction,
            "pdserve_reason": decision.reason,
        }
        return decision.replicas, state

    def _report(self, ctx: Any, decision: ScaleDecision, bounds: tuple[int, int]) -> None:
        """Log a decision that changes what Serve will do (direction, or the count within the
        pool's bounds) and every scale event; publish the pool's scaling document."""
        target = ctx.target_num_replicas
        clipped = min(max(decision.replicas, bounds[0]), bounds[1])
        key = (decision.direction, clipped)
        if decision.direction != "hold" and clipped != target and key != self._last:
            log.info("pdserve autoscaling %s wants: %s", self.pool, decision.reason)
        self._last = key
        doc, event = self._journal.tick(decision, ctx.current_num_replicas, target, self._now())
        if event is not None:
            log.info(
                "pdserve autoscaling %s: %d -> %d replicas (%s)",
                self.pool, event.from_replicas, event.to_replicas, event.reason,
            )  # fmt: skip
        if doc is not None:
            try:
                self._publish(ctx.app_name or "", doc)
            except Exception:  # watching is best effort: never block scaling on it
                log.debug(
                    "pdserve autoscaling: cannot publish %s's state", self.pool, exc_info=True
                )
