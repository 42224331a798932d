"""What a simulation returns: each request as the client saw it, with pdserve's timeline
stages as the router would have recorded them (pure data, filled in by `Simulation`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pdserve.router.policy import Decision
from pdserve.sim.engine import Seq
from pdserve.sim.workload import SimRequest


@dataclass(slots=True)
class SimResult:
    """What the client saw for one request (seconds; `sent_s` on the simulation clock)."""

    request: SimRequest
    sent_s: float
    ttft_s: float | None = None
    e2e_s: float | None = None
    chunk_gaps_s: tuple[float, ...] = ()
    cached_tokens: int = 0
    local_prefill: bool = False
    decision: Decision | None = None
    stages: dict[str, float] = field(default_factory=dict)
    """pdserve's timeline stages as the router would have recorded them (router/timeline.py:
    router_queue, prefill_queue, prefill, prefill_hops, kv_transfer, decode_first_token,
    decode_hops, decode); they add up to the router's TTFT, the client adds client_time_s."""
    handoff_at_s: float = 0.0
    handoff_s: float = 0.0
    """A remote prefill's handoff: when its prompt was done, and the two hops that followed
    (the reply to the router, the call to the decode replica)."""


@dataclass(slots=True)
class SimOutcome:
    """Every request's result, in request order, and the span from the first send to the
    last completion."""

    results: list[SimResult] = field(default_factory=list)
    wall_s: float = 0.0


def decode_stages(result: SimResult, seq: Seq, first_s: float, last_s: float) -> None:
    """Fill in `result`'s decode-side stages, given when its first and last chunk reached the
    router: the decode engine's wait (for the KV, or in its queue), its work to the first
    token, and the hops that remain of the window (the handoff's second half; the dispatch
    hop of a local prefill), as the router records them from vLLM's timestamps."""
    first_token_s = seq.token_times_s[0]
    scheduled_s = seq.scheduled_s if seq.scheduled_s is not None else first_token_s
    remote = result.decision is not None and result.decision.prefill_replica_id is not None
    accepted_s = result.handoff_at_s + result.handoff_s if remote else seq.queued_s
    accepted_s = scheduled_s if accepted_s is None else accepted_s
    window_start_s = (
        result.handoff_at_s + result.handoff_s / 2
        if remote
        else result.sent_s + result.stages["router_queue"]
    )
    result.stages["kv_transfer"] = scheduled_s - accepted_s
    result.stages["decode_first_token"] = first_token_s - scheduled_s
    result.stages["decode_hops"] = (first_s - window_start_s) - (first_token_s - accepted_s)
    result.stages["decode"] = last_s - first_s
