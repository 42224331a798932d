"""The requests a simulation replays (pure): built from a `pdserve bench` workload spec
(mixed, synthetic) or a Mooncake-format trace, with the same lengths, limits and arrivals the
bench would send for the same options and seed (the bench's own samplers and limits)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from pdserve.bench.config import BenchConfig
from pdserve.bench.distributions import poisson_arrivals
from pdserve.bench.limits import apply_limits
from pdserve.bench.mixed import LONG, burst_arrivals, mixed_classes
from pdserve.bench.synthetic import CLASS as SYNTHETIC
from pdserve.bench.synthetic import sample_lengths
from pdserve.bench.trace import CLASS as TRACE
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
    classes, lengths (after `--max-input-tokens`, `--max-output-tokens` and `--clip-mode`)
    and arrivals (`request_rate`; None = closed loop), drawn from the bench's own seeds. Every
    prompt is unique, as the bench's per-request tags make it."""
    if cfg.workload == "mixed":
        classes = mixed_classes(cfg.num_requests, cfg.long_fraction, cfg.burst_size)
        arrivals: Sequence[float | None] = [None] * len(classes)
        if cfg.request_rate is not None:
            rng = random.Random(f"{cfg.seed}:mixed:arrivals")
            arrivals = burst_arrivals(classes, cfg.request_rate, rng)
        lengths = [cfg.long_tokens if c == LONG else cfg.short_tokens for c in classes]
        outputs = [cfg.output_tokens] * len(classes)
    elif cfg.workload == "synthetic":
        pairs = sample_lengths(cfg)
        arrivals = [None] * len(pairs)
        if cfg.request_rate is not None:
            rng = random.Random(f"{cfg.seed}:synthetic:arrivals")
            arrivals = list(poisson_arrivals(len(pairs), cfg.request_rate, rng))
        kept = [
            (arrival, limited)
            for arrival, (n_in, n_out) in zip(arrivals, pairs, strict=True)
            if (limited := apply_limits(cfg, n_in, n_out)) is not None
        ]
        arrivals = [arrival for arrival, _ in kept]
        lengths = [limited.input_tokens for _, limited in kept]
        outputs = [limited.output_tokens for _, limited in kept]
        classes = [SYNTHETIC] * len(kept)
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
    records: Sequence[TraceRecord], block_size_tokens: int, cfg: BenchConfig
) -> list[SimRequest]:
    """A Mooncake-format trace as `pdserve bench --workload trace` replays it with `cfg`:
    arrival = (timestamp - the first record's) x `trace_time_scale`; lengths x
    `trace_length_scale`, then the length limits (a request `--clip-mode skip` drops is not
    sent, and `--max-requests` counts the ones sent); each hash id stands for
    `trace_block_tokens` x `trace_length_scale` tokens, so requests whose hash-id lists share
    a prefix share that many prompt tokens (the engine blocks inside it hash alike)."""
    trace_block = max(1, round(cfg.trace_block_tokens * cfg.trace_length_scale))
    out: list[SimRequest] = []
    t0 = records[0].timestamp_ms if records else 0.0
    for i, rec in enumerate(records):
        if cfg.max_requests is not None and len(out) >= cfg.max_requests:
            break
        n_in = max(1, round(rec.input_length * cfg.trace_length_scale))
        limited = apply_limits(cfg, n_in, max(1, rec.output_length))
        if limited is None:
            continue
        n = limited.input_tokens
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
                request_class=TRACE,
                arrival_s=(rec.timestamp_ms - t0) / 1000.0 * cfg.trace_time_scale,
                prompt_tokens=n,
                output_tokens=limited.output_tokens,
                block_hashes=tuple(hashes),
            )
        )
    return out
