"""The kv-check report: one row per (operation, size), the transports and the verdict (pure).

`to_json` defines the `--json` file (REPORT_VERSION 1): top-level `mode`, `device`,
`expected`, `expectation_met`, `fallback_to_tcp`, `transports` (the data-path "tl/device"
strings), `transport_detection` (how they were found), `fabrics`, `warnings`, `ucx_version`,
and `sizes`: one object per (op, size) with `op`, `bytes`, `iterations`, `latency_p50_s`,
`latency_p99_s`, `bandwidth_gbps`, `memcpy_bandwidth_gbps`, `ratio_to_memcpy`, `transports`.
Bandwidths are decimal GB/s (1e9 bytes/s), latencies seconds per transfer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pdserve.kv_transfer.fabric_check.fabric import Verdict
from pdserve.kv_transfer.fabric_check.stats import TimingSummary, ratio

REPORT_VERSION = 1


@dataclass(frozen=True)
class SizeRow:
    """One operation at one size: NIXL timings beside a memcpy of the same size, same run."""

    op: str
    num_bytes: int
    iterations: int
    latency_p50_s: float
    latency_p99_s: float
    bandwidth_gbps: float
    memcpy_latency_p50_s: float
    memcpy_bandwidth_gbps: float
    ratio_to_memcpy: float
    transports: tuple[str, ...]


@dataclass(frozen=True)
class Report:
    """A whole run. `peer` is "HOST:PORT" in two-node mode, None otherwise."""

    mode: str
    device: str
    peer: str | None
    rows: tuple[SizeRow, ...]
    transports: tuple[str, ...]
    transport_detection: str
    endpoint_transports: tuple[str, ...]
    verdict: Verdict
    ucx_version: str | None
    duration_s: float


def build_row(
    op: str, nixl: TimingSummary, memcpy: TimingSummary, transports: Sequence[str]
) -> SizeRow:
    """Pair the NIXL and memcpy summaries of one size; raises ValueError if the sizes differ."""
    if nixl.num_bytes != memcpy.num_bytes:
        raise ValueError(f"NIXL ({nixl.num_bytes} B) and memcpy ({memcpy.num_bytes} B) differ")
    return SizeRow(
        op=op,
        num_bytes=nixl.num_bytes,
        iterations=nixl.num_samples,
        latency_p50_s=nixl.latency_p50_s,
        latency_p99_s=nixl.latency_p99_s,
        bandwidth_gbps=nixl.bandwidth_gbps,
        memcpy_latency_p50_s=memcpy.latency_p50_s,
        memcpy_bandwidth_gbps=memcpy.bandwidth_gbps,
        ratio_to_memcpy=ratio(nixl.bandwidth_gbps, memcpy.bandwidth_gbps),
        transports=tuple(transports),
    )


def data_path(rows: Sequence[SizeRow]) -> tuple[str, ...]:
    """Every transport seen on any row, sorted."""
    return tuple(sorted({t for row in rows for t in row.transports}))


def to_json(report: Report) -> dict[str, Any]:
    """The `--json` document (see the module docstring)."""
    verdict = report.verdict
    return {
        "report_version": REPORT_VERSION,
        "mode": report.mode,
        "device": report.device,
        "peer": report.peer,
        "expected": verdict.expected,
        "expectation_met": verdict.met,
        "fallback_to_tcp": verdict.fallback_to_tcp,
        "transports": list(report.transports),
        "transport_detection": report.transport_detection,
        "endpoint_transports": list(report.endpoint_transports),
        "fabrics": list(verdict.fabrics),
        "warnings": list(verdict.warnings),
        "ucx_version": report.ucx_version,
        "duration_s": report.duration_s,
        "sizes": [
            {
                "op": row.op,
                "bytes": row.num_bytes,
                "iterations": row.iterations,
                "latency_p50_s": row.latency_p50_s,
                "latency_p99_s": row.latency_p99_s,
                "bandwidth_gbps": row.bandwidth_gbps,
                "memcpy_latency_p50_s": row.memcpy_latency_p50_s,
                "memcpy_bandwidth_gbps": row.memcpy_bandwidth_gbps,
                "ratio_to_memcpy": row.ratio_to_memcpy,
                "transports": list(row.transports),
            }
            for row in report.rows
        ],
    }
