"""What a local prefill costs the streams decoding on that replica, and whether it is worth it.

Pure (no I/O, no numba: the decode engine's scheduler imports it too). Two callers share one
rule, so the router predicts what the engine then does:

- the routing pipeline (`ItlGuard.judge`), once per request that the local-prefill rules or
  spill-over would prefill on its decode replica;
- the decode engine's scheduler (pdserve.engine.itl_scheduler), once per engine step:
  `chunk_tokens` is how many prompt tokens a step may carry next to its decoding streams.

The model (coefficients from `CostModel`, the profile-fitted ones where the deployment sets
them; `chunk_s` and `chunk_tokens` in pdserve.itl_budget). A decode step of b streams takes
`est_decode_step_s(b, 0)`; a step that also carries t prompt tokens after c computed takes
that plus chunk_s(t, c), the prefill model without its per-request fixed cost. The **ITL
budget** is the deployment's
`itl_slo_s`: the largest chunk whose step stays within it is the chunk the engine runs, so the
streams' predicted inter-token latency on a step with prefill stays at or under the SLO. When
not even `min_chunk_tokens` fit, the replica has no headroom and a local prefill is refused.

A local prefill of u uncached tokens then **stalls** each of the b streams by the prefill's
compute, chunk_s(u, c) (its per-request fixed cost is not step time), spread over
ceil(u / chunk) steps, each within the budget. It is **worth it** when the time to first token
it saves (remote prediction - local prediction) is at least `stall_weight` x b x that stall.
With weight 0 (the default) the SLO bound alone decides: a stall kept within the ITL budget
costs the streams end-to-end time but no SLO; with weight 1 the request's saved seconds must
also cover the seconds the streams lose in total. With no streams, a local prefill costs
nobody.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pdserve.itl_budget import chunk_s, chunk_tokens
from pdserve.router.policy.cost_model import CostModel

__all__ = ["ItlCost", "ItlGuard", "ItlVerdict", "ItlVerdictCode", "chunk_s", "chunk_tokens"]


@dataclass(frozen=True, slots=True)
class ItlCost:
    """The predicted effect of one local prefill on its decode replica's streams.

    `streams`: requests decoding there (the engine's running count, at least the router's own
    open streams). `base_step_s`: a decode step of those streams alone. `chunk_tokens`: prompt
    tokens per step within the ITL budget (0: no headroom). `steps`: steps the prompt
    occupies. `step_s`: the streams' predicted inter-token latency on those steps (base + the
    first, largest-cost-per-token-so-far chunk). `stall_s`: seconds each stream waits in total
    on them (the prefill's compute). `budget_s`: the ITL SLO the steps are held to.
    """

    streams: int
    base_step_s: float
    chunk_tokens: int
    steps: int
    step_s: float
    stall_s: float
    budget_s: float

    @property
    def stream_stall_s(self) -> float:
        """Seconds lost by all the streams together (streams x stall)."""
        return self.streams * self.stall_s

    def header(self) -> str:
        """The ITL part of the x-pdserve-decision header: budget, predicted step, streams,
        chunk."""
        return (
            f"itl budget {self.budget_s * 1e3:.0f} ms, step {self.step_s * 1e3:.1f} ms with "
            f"{self.streams} streams, chunk {self.chunk_tokens} tokens x {self.steps}"
        )


ItlVerdictCode = Literal["worth", "not_worth", "no_headroom", "idle"]
"""The guard's verdicts (the `verdict` label of pdserve_itl_guard_decisions_total; `idle`, no
streams decoding, is never weighed by the pipeline)."""


@dataclass(frozen=True, slots=True)
class ItlVerdict:
    """`local`: prefill on the decode replica. `reason`: why, for the decision header and the
    decision counter's label (`code`: no_headroom, not_worth, worth, idle)."""

    local: bool
    code: ItlVerdictCode
    reason: str
    cost: ItlCost


class ItlGuard:
    """The rule, with the deployment's SLO and exchange rate. `itl_slo_s` None turns it off
    (every local prefill the other rules choose goes ahead, as before this guard)."""

    def __init__(
        self,
        cost: CostModel,
        itl_slo_s: float | None,
        *,
        stall_weight: float = 0.0,
        min_chunk_tokens: int = 16,
    ) -> None:
        if itl_slo_s is not None and itl_slo_s <= 0:
            raise ValueError(f"itl_slo_s must be > 0 or None, got {itl_slo_s}")
        if stall_weight < 0:
            raise ValueError(f"stall_weight must be >= 0, got {stall_weight}")
        if min_chunk_tokens < 1:
            raise ValueError(f"min_chunk_tokens must be >= 1, got {min_chunk_tokens}")
        self._cost = cost
        self.itl_slo_s = itl_slo_s
        self.stall_weight = stall_weight
        self.min_chunk_tokens = min_chunk_tokens

    @property
    def enabled(self) -> bool:
        return self.itl_slo_s is not None

    def cost(self, streams: int, uncached_tokens: int, cached_tokens: int) -> ItlCost:
        """What prefilling `uncached_tokens` after `cached_tokens` costs `streams` decoding
        streams on one replica. Requires an enabled guard."""
        if self.itl_slo_s is None:
            raise ValueError("the ITL guard is off (itl_slo_s is None)")
        budget = self.itl_slo_s
        streams = max(0, streams)
        u = max(0, uncached_tokens)
        base = self._cost.est_decode_step_s(streams, 0)
        stall = chunk_s(self._cost, u, cached_tokens)
        if streams == 0:
            # Nobody decodes: the engine runs the prompt in its configured chunks.
            return ItlCost(0, base, u, 1 if u else 0, base + stall, 0.0, budget)
        chunk = chunk_tokens(self._cost, budget, streams, cached_tokens, u)
        if u and chunk < min(self.min_chunk_tokens, u):
            smallest = chunk_s(self._cost, min(self.min_chunk_tokens, u), cached_tokens)
            return ItlCost(streams, base, 0, 0, base + smallest, stall, budget)
        if not u:
            return ItlCost(streams, base, 0, 0, base, 0.0, budget)
        steps = math.ceil(u / chunk)
        # Later chunks attend to more context: the step is bounded by the costlier of the
        # first full chunk and the last one.
        last = u - (steps - 1) * chunk
        worst = max(
            chunk_s(self._cost, chunk, cached_tokens),
            chunk_s(self._cost, last, cached_tokens + u - last),
        )
        return ItlCost(streams, base, chunk, steps, base + worst, stall, budget)

    def local_ttft_s(self, c: ItlCost, queued_s: float, est_prefill_s: float) -> float:
        """Predicted time to first token of a local prefill: the replica's queued prefill work,
        then the prompt, which takes at least its own estimate and, chunked within the budget,
        `steps` steps of `step_s`."""
        return queued_s + max(est_prefill_s, c.steps * c.step_s)

    def judge(
        self,
        streams: int,
        uncached_tokens: int,
        cached_tokens: int,
        ttft_saved_s: float | None,
    ) -> ItlVerdict:
        """Whether a local prefill on a replica with `streams` decoding is allowed.

        `ttft_saved_s`: predicted remote TTFT - predicted local TTFT (None: no remote option
        was weighed, e.g. the prompt is too small to consider; then only the SLO bound
        applies)."""
        c = self.cost(streams, uncached_tokens, cached_tokens)
        if c.streams == 0:
            return ItlVerdict(True, "idle", "no streams decoding there", c)
        if c.chunk_tokens == 0 and uncached_tokens > 0:
            return ItlVerdict(
                False,
                "no_headroom",
                f"a {min(self.min_chunk_tokens, uncached_tokens)}-token chunk would take the "
                f"step to {c.step_s * 1e3:.1f} ms, over the {c.budget_s * 1e3:.0f} ms ITL "
                f"budget of its {c.streams} streams",
                c,
            )
        cost_s = self.stall_weight * c.stream_stall_s
        if ttft_saved_s is not None and ttft_saved_s < cost_s:
            return ItlVerdict(
                False,
                "not_worth",
                f"saves {ttft_saved_s * 1e3:.0f} ms of TTFT, costs {c.streams} streams "
                f"{c.stall_s * 1e3:.1f} ms each",
                c,
            )
        saved = "" if ttft_saved_s is None else f"saves {ttft_saved_s * 1e3:.0f} ms of TTFT, "
        return ItlVerdict(
            True,
            "worth",
            f"{saved}costs {c.streams} streams {c.stall_s * 1e3:.1f} ms each",
            c,
        )
