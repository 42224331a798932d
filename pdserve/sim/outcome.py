"""What a simulation returns: each request as the client saw it, with pdserve's timeline
stages as the router would have recorded them (pure data, filled in by `Simulation`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pdserve.router.policy import Decision
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
