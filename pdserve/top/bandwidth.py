"""Effective KV bandwidth over the window and the check against the fabric baseline (pure).

Observed bandwidth = Δ`pdserve_kv_transfer_bytes_sum` / Δ`pdserve_kv_transfer_seconds_sum`
(bytes/s, decimal units as `pdserve kv-check`). The baseline is a `pdserve kv-check --json`
report: its `sizes` rows ({op, bytes, bandwidth_gbps, ...}; decimal GB/s). The reference point
is the row whose size is closest (in ratio) to the observed mean bytes per transfer, or the
best bandwidth when that mean is unknown; READ rows are preferred (decode pulls the KV).
A warning is raised when observed < warn_fraction × reference.
"""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pdserve.top.scrape import SampleKey, total
from pdserve.top.units import fmt_bandwidth, fmt_bytes

BYTES = "pdserve_kv_transfer_bytes"
SECONDS = "pdserve_kv_transfer_seconds"
HINT = "no fabric baseline (run pdserve kv-check --json)"


class FabricReportError(ValueError):
    """The --fabric-json file is missing, not JSON, or has no usable `sizes` rows."""


@dataclass(frozen=True)
class FabricPoint:
    """One kv-check measurement: `op` ("READ"/"WRITE") of `num_bytes` at `bytes_per_s`."""

    op: str
    num_bytes: int
    bytes_per_s: float


def parse_fabric_report(doc: Any) -> tuple[FabricPoint, ...]:
    """The usable rows of a kv-check JSON document; raises FabricReportError if none."""
    rows = doc.get("sizes") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise FabricReportError("not a `pdserve kv-check --json` report (no `sizes` list)")
    points = []
    for row in rows:
        try:
            point = FabricPoint(
                op=str(row.get("op", "")).upper(),
                num_bytes=int(row["bytes"]),
                bytes_per_s=float(row["bandwidth_gbps"]) * 1e9,
            )
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
        if point.num_bytes > 0 and point.bytes_per_s > 0 and math.isfinite(point.bytes_per_s):
            points.append(point)
    if not points:
        raise FabricReportError("the kv-check report has no row with bytes and bandwidth_gbps")
    return tuple(points)


def load_fabric_report(path: pathlib.Path) -> tuple[FabricPoint, ...]:
    """Read and parse a kv-check JSON file (FabricReportError on any problem)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise FabricReportError(f"cannot read {path}: {exc}") from exc
    return parse_fabric_report(doc)


def reference_point(points: tuple[FabricPoint, ...], mean_bytes: float | None) -> FabricPoint:
    """The closest-size READ row to `mean_bytes` (best bandwidth when it is None or <= 0)."""
    reads = tuple(p for p in points if p.op == "READ") or points
    if mean_bytes is None or mean_bytes <= 0:
        return max(reads, key=lambda p: p.bytes_per_s)
    return min(reads, key=lambda p: (abs(math.log(p.num_bytes / mean_bytes)), -p.bytes_per_s))


@dataclass(frozen=True)
class KvBandwidth:
    """KV transfers in the window: count, moved bytes, time spent, derived means."""

    transfers: float
    bytes_moved: float
    seconds: float

    @property
    def bytes_per_s(self) -> float | None:
        """Effective bandwidth; None without transfer time in the window."""
        return self.bytes_moved / self.seconds if self.seconds > 0 else None

    @property
    def mean_bytes(self) -> float | None:
        """Mean bytes per transfer; None without transfers."""
        return self.bytes_moved / self.transfers if self.transfers > 0 else None


def kv_bandwidth(delta: Mapping[SampleKey, float]) -> KvBandwidth:
    """The window's KV transfer totals from the histogram `_sum`/`_count` deltas."""
    return KvBandwidth(
        transfers=total(delta, f"{BYTES}_count"),
        bytes_moved=total(delta, f"{BYTES}_sum"),
        seconds=total(delta, f"{SECONDS}_sum"),
    )


@dataclass(frozen=True)
class BandwidthVerdict:
    """`level`: "warn" (far below the fabric), "ok" (compared, fine) or "info" (no comparison)."""

    level: Literal["warn", "ok", "info"]
    message: str
    fraction_of_fabric: float | None = None


def bandwidth_verdict(
    observed: KvBandwidth, points: tuple[FabricPoint, ...] | None, warn_fraction: float
) -> BandwidthVerdict:
    """Compare the observed bandwidth with the fabric baseline (see the module contract)."""
    if not points:
        return BandwidthVerdict("info", HINT)
    ref = reference_point(points, observed.mean_bytes)
    where = (
        f"kv-check {fmt_bandwidth(ref.bytes_per_s)} ({ref.op or '?'} {fmt_bytes(ref.num_bytes)})"
    )
    bps = observed.bytes_per_s
    if bps is None:
        return BandwidthVerdict("info", f"no KV transfers in the window; {where}")
    fraction = bps / ref.bytes_per_s
    text = f"KV {fmt_bandwidth(bps)} = {fraction * 100:.2g}% of {where}"
    if fraction < warn_fraction:
        return BandwidthVerdict("warn", f"WARNING: {text} < {warn_fraction:.0%}", fraction)
    return BandwidthVerdict("ok", text, fraction)
