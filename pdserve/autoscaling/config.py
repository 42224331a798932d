"""The `autoscaling` block of a pool's config (pure data; re-exported by pdserve.config)."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from pdserve.names import PoolName
from pdserve.router.policy.strict import StrictModel


class AutoscalingConfig(StrictModel):
    """Ray Serve autoscaling of one pool: bounds, delays, and the signal it scales on."""

    min_replicas: int = Field(default=1, ge=0, description="Fewest replicas kept running.")
    max_replicas: int = Field(default=1, ge=1, description="Most replicas ever started.")
    policy: Literal["slo", "ongoing_requests"] = Field(
        default="slo",
        description=(
            "'slo': scale on the pool's own SLO signal, reported by each replica (prefill: "
            "queued prefill seconds against target_ttft_seconds; decode: KV-cache usage and "
            "inter-token latency against target_kv_usage / target_itl_seconds; "
            "pdserve/autoscaling/policy.py). 'ongoing_requests': Ray Serve's default policy "
            "on target_ongoing_requests."
        ),
    )
    target_ongoing_requests: float = Field(
        default=8.0,
        gt=0,
        description="policy 'ongoing_requests' only: ongoing requests per replica to aim for.",
    )
    target_ttft_seconds: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Prefill pool, policy 'slo': queued prefill work per replica (cost-model seconds: "
            "the wait a new prompt sees before its own prefill) to keep under. None = 1.0."
        ),
    )
    target_itl_seconds: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Decode pool, policy 'slo': inter-token latency to keep every replica under (one "
            "replica more while any is over it). None = 0.1."
        ),
    )
    target_kv_usage: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Decode pool, policy 'slo': KV-cache usage per replica to aim for. None = 0.8.",
    )
    down_fraction: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description=(
            "Policy 'slo': remove a replica only when, with one fewer, the signals would sit at "
            "or under this fraction of their targets (margin against flapping)."
        ),
    )
    upscale_delay_seconds: float = Field(
        default=30.0, ge=0, description="A scale-up must be wanted this long in a row."
    )
    downscale_delay_seconds: float = Field(
        default=300.0, ge=0, description="A scale-down must be wanted this long in a row."
    )
    metrics_interval_seconds: float = Field(
        default=2.0,
        gt=0,
        description=(
            "How often each replica sends its signals to Ray Serve's controller (Serve samples "
            "them every min(0.2 x look_back_period_seconds, this))."
        ),
    )
    look_back_period_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Ray Serve averages each replica's signals over this window.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"autoscaling.min_replicas ({self.min_replicas}) must be <= "
                f"max_replicas ({self.max_replicas})"
            )
        if self.look_back_period_seconds <= self.metrics_interval_seconds:
            raise ValueError(
                f"autoscaling.look_back_period_seconds ({self.look_back_period_seconds:g}) must "
                f"be > metrics_interval_seconds ({self.metrics_interval_seconds:g})"
            )
        return self

    def slo_targets(self, pool: PoolName) -> dict[str, float]:
        """The 'slo' policy's targets for `pool`, defaults filled in."""
        if pool == "prefill":
            return {"target_ttft_seconds": self.target_ttft_seconds or 1.0}
        return {
            "target_itl_seconds": self.target_itl_seconds or 0.1,
            "target_kv_usage": self.target_kv_usage or 0.8,
        }

    def check_pool(self, pool: PoolName) -> None:
        """Raise ValueError for a target set on the pool it does not apply to."""
        only = {
            "target_ttft_seconds": "prefill",
            "target_itl_seconds": "decode",
            "target_kv_usage": "decode",
        }
        wrong = sorted(
            k for k, owner in only.items() if owner != pool and getattr(self, k) is not None
        )
        if wrong:
            raise ValueError(
                f"{pool}.autoscaling: {', '.join(wrong)} apply only to the {only[wrong[0]]} pool"
            )
