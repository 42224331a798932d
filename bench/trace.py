"""The `trace` workload: replay a Mooncake-format JSONL trace (pure, plus `load_trace`).

Each line: `{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}`,
one hash id per `--trace-block-tokens` block of the prompt. Each hash id maps to a fixed
block of text (or token ids), so requests that share hash-id prefixes share prompt prefixes
and a prefix cache sees the trace's reuse. `--trace-length-scale` shrinks input lengths and
the block size together (the sharing structure is kept); output lengths are not scaled.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterable
from dataclasses import dataclass

from pdserve.bench.config import BenchConfig
from pdserve.bench.limits import apply_limits
from pdserve.bench.models import RequestSpec, WorkloadPlan
from pdserve.bench.prompts import PromptFactory

CLASS = "trace"


@dataclass(frozen=True)
class TraceRecord:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def parse_trace(lines: Iterable[str]) -> list[TraceRecord]:
    """Parse JSONL lines (blank lines skipped); ValueError names the bad line."""
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            records.append(
                TraceRecord(
                    timestamp_ms=float(raw["timestamp"]),
                    input_length=int(raw["input_length"]),
                    output_length=int(raw["output_length"]),
                    hash_ids=tuple(int(h) for h in raw.get("hash_ids", [])),
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"trace line {number}: {exc!r}: {line[:120]!r}") from exc
    return records


def load_trace(path: pathlib.Path) -> list[TraceRecord]:
    """Read and parse a trace file (the only I/O in this module)."""
    with path.open(encoding="utf-8") as f:
        return parse_trace(f)


def build_trace(
    records: list[TraceRecord], cfg: BenchConfig, factory: PromptFactory
) -> WorkloadPlan:
    """Requests in trace order, arrivals = (timestamp - first) x time scale, at most
    `cfg.max_requests` of them (counted after skips)."""
    block_tokens = max(1, round(cfg.trace_block_tokens * cfg.trace_length_scale))
    start_ms = records[0].timestamp_ms if records else 0.0
    specs: list[RequestSpec] = []
    clipped_in = clipped_out = skipped = 0
    for i, rec in enumerate(records):
        if cfg.max_requests is not None and len(specs) >= cfg.max_requests:
            break
        n_in = max(1, round(rec.input_length * cfg.trace_length_scale))
        limited = apply_limits(cfg, n_in, max(1, rec.output_length))
        if limited is None:
            skipped += 1
            continue
        clipped_in += limited.input_clipped
        clipped_out += limited.output_clipped
        prompt = factory.from_blocks(f"trace:{i}", rec.hash_ids, block_tokens, limited.input_tokens)
        specs.append(
            RequestSpec(
                index=i,
                request_class=CLASS,
                max_tokens=limited.output_tokens,
                target_prompt_tokens=limited.input_tokens,
                prompt=prompt,
                arrival_s=(rec.timestamp_ms - start_ms) / 1000.0 * cfg.trace_time_scale,
            )
        )
    return WorkloadPlan(
        specs=tuple(specs),
        num_input_clipped=clipped_in,
        num_output_clipped=clipped_out,
        num_skipped=skipped,
    )
