"""The elastic-tiers run as a report (pure): per phase, the requests' TTFT and ITL percentiles
and failures; over the run, each pool's replica counts as a list of changes.

`bench/elastic.py` drives the load and samples the router; this module only summarizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pdserve.bench.models import RequestResult
from pdserve.bench.stats import percentile


@dataclass(frozen=True)
class Sample:
    """The router's view at `t_s` (seconds since the run started): per pool, replicas
    reporting routing stats (`ready`) and Ray Serve's target."""

    t_s: float
    ready: dict[str, int]
    target: dict[str, int]


@dataclass(frozen=True)
class PhaseSummary:
    name: str
    start_s: float
    duration_s: float
    requests: int
    failed: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    itl_p99_s: float | None
    """Gaps between streamed chunks (the router coalesces tokens into chunks)."""


def summarize_phase(
    name: str, start_s: float, duration_s: float, results: Sequence[RequestResult]
) -> PhaseSummary:
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    gaps = [g for r in ok for g in r.chunk_gaps_s]
    return PhaseSummary(
        name=name,
        start_s=start_s,
        duration_s=duration_s,
        requests=len(results),
        failed=len(results) - len(ok),
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p99_s=percentile(ttfts, 99),
        itl_p99_s=percentile(gaps, 99),
    )


@dataclass(frozen=True)
class Change:
    """At `t_s`, `pool`'s ready replicas or target changed to these values."""

    t_s: float
    pool: str
    ready: int
    target: int


def changes(samples: Sequence[Sample]) -> list[Change]:
    """Each pool's (ready, target) whenever it differs from the previous sample (the first
    sample counts as a change)."""
    out: list[Change] = []
    last: dict[str, tuple[int, int]] = {}
    for s in samples:
        for pool in sorted(set(s.ready) | set(s.target)):
            now = (s.ready.get(pool, 0), s.target.get(pool, 0))
            if last.get(pool) != now:
                out.append(Change(s.t_s, pool, *now))
                last[pool] = now
    return out
