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
    pace_weight: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description=(
            "Measured pace: each finished prefill's weight in a moving mean, per pool, of its "
            "engine-measured seconds ÷ the cost model's prediction. The local-vs-remote "
            "comparison (spill-over, and the TTFT a local prefill saves in the ITL guard) "
            "scales each side's predicted compute, queued work and the prompt, by its pool's "
            "mean, so a prefill pool slower under load than its profile is seen as it is now. "
            "Placement within a pool is unchanged. Set it with a profiled cost model (`pdserve "
            "profile`): a pool's mean moves only with that pool's own prefills, so with a model "
            "far off (the defaults) one pool can be corrected long before the other and the "
            "comparison leans to it. 0 (the default): the cost model's predictions as they "
            "are."
        ),
    )
    itl_slo_s: float | None = Field(
        default=0.1,
        gt=0,
        description=(
            "Inter-token latency budget of the decode streams per engine step (seconds). The "
            "router sends a stream's tokens every router.stream_batch_interval_ms, so a client "
            "sees gaps of up to that interval plus one step: set this to the client-side ITL "
            "SLO less that interval. A prompt prefilled on a "
            "decode replica (local rules or spill-over) is chunked so that each step of that "
            "replica's streams is predicted to stay within it (the decode engines apply the "
            "same chunk every step), and is refused there when not even "
            "min_prefill_chunk_tokens fit, when it is predicted no sooner than a remote "
            "prefill, or (stall_weight > 0) when the time to first token it saves is less "
            "than stall_weight x the seconds it costs the streams. null "
            "turns the guard off: local prefills go ahead on the other rules alone."
        ),
    )
    stall_weight: float = Field(
        default=0.0,
        ge=0,
        description=(
            "Seconds of time to first token that one second of stall on one decode stream is "
            "worth when weighing a local prefill. 0: the ITL SLO bound alone decides (a step "
            "kept within itl_slo_s costs the streams no SLO, only end-to-end time); 1: the "
            "seconds the request saves must also cover the seconds all the streams lose (the "
            "total wait of all requests); more protects the streams further."
        ),
    )
    min_prefill_chunk_tokens: int = Field(
        default=16,
        ge=1,
        description=(
            "Smallest prompt chunk a decode step carries next to its streams; when even this "
            "would take the step over itl_slo_s, the replica has no headroom for a local "
            "prefill."
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
