"""One request's path through the cluster as stage durations (pure).

The router's observer (router/observe.py) sets its own moments on the router's monotonic clock
(the `*_s` fields); the engines report their own timestamps (`EngineTimes`, each on its
engine's clock). Stages are built only from differences on one clock, so they stay valid when
router, prefill and decode run on different hosts; hops between processes are what remains of
each router-measured window. The stages add up to the end-to-end latency the router measured.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from pdserve.messages import EngineTimes

STAGES = (
    "router_queue",
    "prefill_queue",
    "prefill",
    "prefill_hops",
    "kv_transfer",
    "decode_first_token",
    "decode_hops",
    "decode",
)
"""In path order. router_queue: arrival → prefill dispatched (validation, tokenization,
placement). prefill_queue / prefill: waiting in, and computing on, the prefill engine.
prefill_hops: the rest of the prefill round trip (Ray Serve hops, serialization).
kv_transfer: the decode engine's wait from accepting the request to scheduling it: the KV pull
over NIXL plus any wait for a decode slot (pdserve_kv_wait_seconds; NIXL's own transfer time is
pdserve_kv_transfer_seconds). For a local prefill: waiting in the decode engine's queue.
decode_first_token: decode admission to first token (for a local prefill: includes the local
prefill). decode_hops: the rest of the window from prefill result to first token at the
router. decode: first token → last token."""


@dataclass
class Timeline:
    """Marks for one request; `stages()` turns them into durations. One per request."""

    arrival_s: float
    prefill_dispatched_s: float | None = None
    prefill_returned_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    prefill_engine: EngineTimes | None = None
    decode_engine: EngineTimes | None = None
    local_prefill: bool = False
    deliveries: list[tuple[float, int]] = field(default_factory=list)
    """(router time in s, number of tokens) per stream chunk received from decode."""
    prefill_replica_id: str = ""
    """The replicas that actually served the request (from their own replies)."""
    decode_replica_id: str = ""
    kv_verified: bool = False
    """The router asked the engines to check this request's KV handoff (kv_transfer.verify)."""
    kv_recomputed: str | None = None
    """Why the decode engine recomputed the prompt instead of decoding from its handoff (a KV
    integrity failure reason: digest, identity, stale, unverifiable); None: it did not."""

    def stages(self) -> dict[str, float]:
        """Durations in seconds of the stages reached so far (all >= 0)."""
        out: dict[str, float] = {}
        dispatched = self.prefill_dispatched_s
        if dispatched is None:
            return out
        out["router_queue"] = dispatched - self.arrival_s
        window_start = dispatched
        if self.prefill_returned_s is not None:
            window = _split(self.prefill_engine, self.prefill_returned_s - dispatched)
            out.update(zip(("prefill_queue", "prefill", "prefill_hops"), window, strict=True))
            window_start = self.prefill_returned_s
        if self.first_token_s is not None:
            window = _split(self.decode_engine, self.first_token_s - window_start)
            names = ("kv_transfer", "decode_first_token", "decode_hops")
            out.update(zip(names, window, strict=True))
        if self.last_token_s is not None and self.first_token_s is not None:
            out["decode"] = self.last_token_s - self.first_token_s
        return {k: round(max(0.0, v), 6) for k, v in out.items()}

    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    def e2e_s(self) -> float | None:
        return None if self.last_token_s is None else self.last_token_s - self.arrival_s

    def inter_token_s(self) -> list[float]:
        """Per-token inter-token latency at the router: each gap between two chunk
        deliveries split evenly over the tokens the later chunk carried (a chunk holds
        several tokens when decode batches its stream)."""
        out: list[float] = []
        for (a, _), (b, n) in itertools.pairwise(self.deliveries):
            if n > 0:
                out.extend([(b - a) / n] * n)
        return out


def _split(engine: EngineTimes | None, window_s: float) -> tuple[float, float, float]:
    """A router-measured window around one engine call → (waiting in the engine, engine work
    up to the first token, the rest: hops between processes). Without engine times the whole
    window counts as hops."""
    wait = max(0.0, engine.scheduled_s - engine.queued_s) if engine else 0.0
    work = max(0.0, engine.first_token_s - engine.scheduled_s) if engine else 0.0
    return wait, work, max(0.0, window_s - wait - work)
