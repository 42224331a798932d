"""The requests a simulation replays (pure): built from a `pdserve bench` workload spec
(mixed, synthetic) or a Mooncake-format trace, with the same lengths and arrivals the bench
would send for the same options and seed."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from pdserve.bench.config import BenchConfig
from pdserve.bench.distributions import poisson_arrivals
from pdserve.bench.mixed import LONG, burst_arrivals, mixed_classes
from pdserve.bench.trace import TraceRecord


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One request: when it is sent (seconds from 0; None = as soon as the concurrency cap
    allows), its prompt and output lengths and its prompt's chained block hashes (one per
    full block of the engines' block size; equal prefixes give equal hashes)."""

    request_id: str
    request_class: str
    arrival_s: float | None
    prompt_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...]
    priority: int = 0


def _unique_hashes(salt: str, num_blocks: int) -> tuple[int, ...]:
    """Hashes of a prompt that shares nothing with any other (a unique tag up front)."""
    base = int.from_bytes(hashlib.blake2b(salt.encode(), digest_size=8).digest(), "big")
    return tuple((base + i) & ((1 << 62) - 1) for i in range(num_blocks))


def from_bench(cfg: BenchConfig, block_size_tokens: int) -> list[SimRequest]:
    """The `mixed` or `synthetic` workload of `pdserve bench` with these options: the same
    classes, lengths and arrivals (`request_rate`; None = closed loop). Every prompt is
    unique, as the bench's per-request tags make it."""
    if cfg.workload == "mixed":
        classes = mixed_classes(cfg.num_requests, cfg.long_fraction, cfg.burst_size)
        arrivals: Sequence[float | None] = [None] * len(classes)
        if cfg.request_rate is not None:
            rng = random.Random(f"{cfg.seed}:mixed:arrivals")
            arrivals = burst_arrivals(classes, cfg.request_rate, rng)
        lengths = [cfg.long_tokens if c == LONG else cfg.short_tokens for c in classes]
        outputs = [cfg.output_tokens] * len(classes)
    elif cfg.workload == "synthetic":
        rng = random.Random(f"{cfg.seed}:synthetic")
        lengths = [cfg.input_distribution.sample(rng) for _ in range(cfg.num_requests)]
        outputs = [cfg.output_distribution.sample(rng) for _ in range(cfg.num_requests)]
        classes = ["all"] * cfg.num_requests
        arrivals = [None] * cfg.num_requests
        if cfg.request_rate is not None:
            arrivals = poisson_arrivals(cfg.num_requests, cfg.request_rate, rng)
    else:
        raise ValueError(
            f"the simulator takes the mixed or synthetic workload (or a trace), not {cfg.workload}"
        )
    return [
        SimRequest(
            request_id=f"r{i}",
            request_class=cls,
            arrival_s=arrival,
            prompt_tokens=n,
            output_tokens=out,
            block_hashes=_unique_hashes(f"{cfg.seed}:{i}", n // block_size_tokens),
        )
        for i, (cls, arrival, n, out) in enumerate(
            zip(classes, arrivals, lengths, outputs, strict=True)
        )
    ]


def from_trace(
    records: Sequence[TraceRecord],
    block_size_tokens: int,
    *,
    trace_block_tokens: int = 512,
    time_scale: float = 1.0,
    length_scale: float = 1.0,
    max_input_tokens: int | None = None,
) -> list[SimRequest]:
    """A Mooncake-format trace: arrival = timestamp x `time_scale`; each hash id stands for
    `trace_block_tokens` x `length_scale` tokens, so requests whose hash-id lists share a
    prefix share that many prompt tokens (the engine blocks inside it hash alike)."""
    trace_block = max(1, round(trace_block_tokens * length_scale))
    out = []
    t0 = records[0].timestamp_ms if records else 0.0
    for i, rec in enumerate(records):
        n = max(1, round(rec.input_length * length_scale))
        if max_input_tokens is not None:
            n = min(n, max_input_tokens)
        hashes = []
        chain = 0
        for b in range(n // block_size_tokens):
            start = b * block_size_tokens
            k = start // trace_block
            # The engine block's content: its trace block (shared while the ids match), and
            # for blocks past the trace's ids, this request's own tokens.
            key = rec.hash_ids[k] if k < len(rec.hash_ids) else -1 - i
            chain = hash((chain, key, start % trace_block)) & ((1 << 62) - 1)
            hashes.append(chain)
        out.append(
            SimRequest(
                request_id=f"t{i}",
                request_class="all",
                arrival_s=(rec.timestamp_ms - t0) / 1000.0 * time_scale,
                prompt_tokens=n,
                output_tokens=max(1, rec.output_length),
                block_hashes=tuple(hashes),
            )
        )
    return out
