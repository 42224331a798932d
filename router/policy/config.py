"""Typed config of the routing policy (pydantic v2, frozen, extra=forbid, every field described).

Read once when the router starts (`RoutingPolicy(config, policy=...)`); part of the deployment
YAML as `router.routing`. Which policy decides is not part of it: that is `router.policy` in
the deployment config, passed to `RoutingPolicy` as `policy`.
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from pdserve.router.policy.cost_model import CostModel
from pdserve.router.policy.strict import StrictModel


class ScorerWeights(StrictModel):
    """Weight of each scorer in the picker's sum (0 turns a scorer off). One field per scorer,
    named as the scorer's `name`. The defaults are the prefill pool's: the smallest predicted
    time to first token, with the prefix cache counted through the uncached-token term (no
    separate cache vote), and free KV cache as a tie-breaker."""

    predicted_ttft: float = Field(
        default=1.0,
        ge=0,
        description=(
            "Weight of 'smallest predicted time to first token' (queued prefill work there, "
            "from the engine's own report, + this prompt's uncached prefill there + the KV "
            "transfer)."
        ),
    )
    prefix_overlap: float = Field(
        default=0.0, ge=0, description="Weight of the fraction of the prompt cached there."
    )
    outstanding_prefill: float = Field(
        default=0.0,
        ge=0,
        description="Weight of 'finishes this prefill first' (queued + own estimated seconds).",
    )
    running_requests: float = Field(
        default=0.0, ge=0, description="Weight of few running + waiting requests."
    )
    kv_usage: float = Field(default=0.1, ge=0, description="Weight of free KV cache.")

    @model_validator(mode="after")
    def _some_weight(self) -> Self:
        if not any(w > 0 for w in self.model_dump().values()):
            raise ValueError("at least one scorer weight must be > 0")
        return self


def _default_decode_weights() -> ScorerWeights:
    return ScorerWeights(
        predicted_ttft=0.0,
        prefix_overlap=1.0,
        outstanding_prefill=0.0,
        running_requests=1.0,
        kv_usage=0.5,
    )


class PolicyConfig(StrictModel):
    """How the router picks prefill and decode replicas and engine priorities."""

    prefill_weights: ScorerWeights = Field(
        default_factory=ScorerWeights,
        description="Scorer weights for choosing the prefill replica.",
    )
    decode_weights: ScorerWeights = Field(
        default_factory=_default_decode_weights,
        description=(
            "Scorer weights for choosing the decode replica: prefix overlap (enables local "
            "prefill), few running requests, free KV cache."
        ),
    )
    max_kv_cache_usage: float = Field(
        default=0.95,
        gt=0,
        le=1,
        description="Replicas above this KV usage are skipped unless all are above it.",
    )
    local_prefill_max_uncached_tokens: int = Field(
        default=256,
        ge=0,
        description=(
            "Prefill on the decode replica when it holds all but fewer than this many prompt "
            "tokens; 0 always prefills remotely."
        ),
    )
    local_prefill_max_cold_tokens: int = Field(
        default=0,
        ge=0,
        description=(
            "Prefill on the decode replica any prompt with fewer than this many uncached "
            "tokens, even one it holds nothing of: too small to be worth a remote prefill "
            "and a KV transfer. 0 = only extend cached prefixes locally."
        ),
    )
    spill_min_gain_s: float = Field(
        default=0.25,
        ge=0,
        description=(
            "Spill-over: a prompt the local-prefill rules send to the prefill pool prefills on "
            "the chosen decode replica instead when that is predicted to reach its first token "
            "at least this many seconds sooner (the prefill pool is backed up). The margin "
            "keeps disaggregation the rule while the prefill pool keeps up: a local prefill "
            "always skips the KV transfer, but costs running streams decode steps."
        ),
    )
    spill_max_decode_prefill_s: float = Field(
        default=0.5,
        ge=0,
        description=(
            "Spill-over bound: only while the decode replica's queued prefill work plus this "
            "prompt stays under this many seconds (chunked prefill spreads it over decode "
            "steps, so running streams' inter-token latency grows by at most about this much "
            "in total). 0 = no spill-over."
        ),
    )
    lanes: bool = Field(
        default=True,
        description=(
            "Keep short prefills off prefill replicas busy with long ones (long requests pack "
            "onto a long lane until its backlog passes lane_max_long_backlog_s)."
        ),
    )
    lane_long_prefill_s: float = Field(
        default=0.1,
        gt=0,
        description="A request whose estimated prefill is at least this is 'long' for lanes.",
    )
    lane_max_long_backlog_s: float = Field(
        default=2.0,
        gt=0,
        description="Estimated queued seconds past which long requests spill off their lane.",
    )
    priority_bucket_base_s: float = Field(
        default=0.05,
        gt=0,
        description="Prefills estimated at or under this get priority 0; each doubling adds 1.",
    )
    max_priority_levels: int = Field(
        default=8, ge=1, description="Number of cost buckets (priorities 0 .. levels-1)."
    )
    aging_s: float = Field(
        default=1.0,
        ge=0,
        description=(
            "A prefill in flight longer than its estimate plus this is starving: new requests "
            "to its replica stop getting a better priority than it."
        ),
    )
    block_size_tokens: int = Field(
        default=128,
        gt=0,
        description="Tokens per hashed prefix block (the engine's KV block size).",
    )
    cost_model: CostModel = Field(
        default_factory=CostModel, description="Prefill/decode cost coefficients."
    )
