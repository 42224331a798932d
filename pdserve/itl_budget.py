"""The decode streams' ITL budget per engine step: how many prompt tokens a step may carry
next to them (pure; neutral ground shared by the router's ITL guard,
pdserve.router.policy.itl_guard, and the decode engine's scheduler,
pdserve.engine.itl_scheduler, so the router predicts what the engine then does).

A decode step of b streams takes `est_decode_step_s(b, 0)`; a step that also carries t prompt
tokens after c computed takes that plus

    chunk_s(t, c) = per_token_s * t + per_token_sq_s * t * (t / 2 + c)

(the prefill cost model without its per-request fixed cost). `chunk_tokens` is the largest t
whose step stays within the budget.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

CONFIG_KEY = "pdserve_itl"
"""The key of `ItlSettings` in vLLM's additional_config."""
STALL_KEY = "pdserve_decode_stall"
"""The key of the stall records, [[step seconds, streams], ...], in a step's stats dict."""


class StepCost(Protocol):
    """The coefficients the budget needs (the router's CostModel has them)."""

    @property
    def per_token_s(self) -> float: ...

    @property
    def per_token_sq_s(self) -> float: ...

    def est_decode_step_s(self, batch_size: int, context_tokens: int) -> float: ...


def chunk_s(cost: StepCost, tokens: int, computed_tokens: int) -> float:
    """Seconds `tokens` prompt tokens add to a step, after `computed_tokens` computed."""
    return cost.per_token_s * tokens + cost.per_token_sq_s * tokens * (tokens / 2 + computed_tokens)


def chunk_tokens(
    cost: StepCost,
    budget_s: float,
    streams: int,
    computed_tokens: int,
    max_tokens: int,
    stream_context_tokens: int = 0,
) -> int:
    """Largest t <= `max_tokens` with est_decode_step_s(streams, stream_context_tokens) +
    chunk_s(t, computed_tokens) <= `budget_s` (0 when none fits). Solves the quadratic
    exactly. The engine knows its streams' context; the router passes 0 (its snapshot does
    not say)."""
    if max_tokens <= 0:
        return 0
    room = budget_s - cost.est_decode_step_s(streams, stream_context_tokens)
    if room <= 0:
        return 0
    a = cost.per_token_sq_s / 2
    b = cost.per_token_s + cost.per_token_sq_s * computed_tokens
    if a > 0:
        t = (-b + math.sqrt(b * b + 4 * a * room)) / (2 * a)
    elif b > 0:
        t = room / b
    else:
        return max_tokens
    return max(0, min(max_tokens, int(t)))


class ItlSettings(BaseModel):
    """What the decode engine's ITL-budget scheduler needs: the budget, the smallest chunk,
    and the cost coefficients of the deployment's `router.routing.cost_model`.
    pdserve.engine.args writes it into vLLM's `additional_config` (`to_config`); the scheduler
    in the engine-core process reads it back (`from_config`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    itl_slo_s: float = Field(gt=0, description="The streams' ITL budget per step (seconds).")
    min_chunk_tokens: int = Field(ge=1, description="Smallest chunk a step may carry.")
    per_token_s: float = Field(ge=0, description="Prefill seconds per computed token.")
    per_token_sq_s: float = Field(ge=0, description="Attention term (see CostModel).")
    decode_base_s: float = Field(ge=0, description="Decode step fixed cost.")
    decode_per_seq_s: float = Field(ge=0, description="Decode step seconds per sequence.")
    decode_per_context_token_s: float = Field(
        ge=0, description="Decode step seconds per context token."
    )

    def est_decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        return (
            self.decode_base_s
            + self.decode_per_seq_s * batch_size
            + self.decode_per_context_token_s * context_tokens
        )

    def to_config(self) -> dict[str, Any]:
        return {CONFIG_KEY: self.model_dump()}

    @classmethod
    def from_config(cls, additional_config: Any) -> ItlSettings | None:
        """The settings in vLLM's additional_config, or None when there are none."""
        if not isinstance(additional_config, dict) or CONFIG_KEY not in additional_config:
            return None
        return cls.model_validate(additional_config[CONFIG_KEY])
