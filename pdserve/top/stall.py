"""The decode tier's streams over the window: how long they waited on engine steps that also
carried prefill, and what the ITL guard decided about local prefills (pure).

Read from the window's deltas (`Delta`) of three router series (router/metric_catalog.py):

* `pdserve_decode_stall_seconds{pool}`: engine-measured, one observation per decoding stream
  per engine step that also carried prefill, valued at that step's seconds. Its `_sum`
  increase is the stream-seconds waited on such steps, its `_count` increase the stream-steps;
  only the `decode` pool's samples count here.
* `pdserve_itl_guard_decisions_total{verdict}`: local prefills on a decode replica the guard
  weighed: `worth` (prefilled there), `not_worth` and `no_headroom` (sent to the prefill pool).
* `pdserve_inter_token_latency_seconds`: the ITL the router measured on the streams, for the
  p99 beside the stall's.

`decode_stall` returns None before the window has two scrapes (no deltas yet); afterwards a
`DecodeStall` whose quantiles are None without observations in the window and whose verdict
counts are 0 for a verdict not seen (a router without the guard shows 0 for all three).
`reported` is False while the router exports no decode stall series at all (no decode engine
has reported its stall yet, or the engines predate it): then "no stall" is not known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pdserve.top.quantile import buckets_by, histogram_quantile, quantile_of
from pdserve.top.scrape import SampleKey, sum_by
from pdserve.top.window import Delta

STALL = "pdserve_decode_stall_seconds"
GUARD = "pdserve_itl_guard_decisions_total"
ITL = "pdserve_inter_token_latency_seconds"
POOL = "decode"
VERDICTS = ("worth", "not_worth", "no_headroom")
"""The guard's verdicts in the order shown; any other verdict label follows, sorted."""


@dataclass(frozen=True)
class DecodeStall:
    """The decode pool's stall and the ITL guard's verdicts over `span_s` seconds."""

    span_s: float
    stream_steps: float
    """Stream-steps on prefill-carrying steps (the stall histogram's `_count` increase)."""
    stalled_s: float
    """Stream-seconds waited on those steps (its `_sum` increase)."""
    p99_s: float | None
    """p99 of the stall observations in the window (a prefill-carrying step's seconds)."""
    itl_p99_s: float | None
    """p99 of the ITL the router measured on the streams in the window."""
    verdicts: tuple[tuple[str, float], ...]
    """(verdict, count in the window): `VERDICTS` first, then any other verdict seen."""
    reported: bool = True
    """Whether the router exports the decode pool's stall series (see the module contract)."""

    @property
    def stall_per_s(self) -> float | None:
        """Stream-seconds waited per second of wall time (None for an empty span): 0.5 means
        the decode streams together lost half a second every second to prefill steps."""
        return self.stalled_s / self.span_s if self.span_s > 0 else None

    def count(self, verdict: str) -> float:
        """How many local prefills got `verdict` in the window (0 when none)."""
        return dict(self.verdicts).get(verdict, 0.0)


def _decode_only(samples: Mapping[SampleKey, float], name: str) -> float | None:
    """The decode pool's `name` samples summed (None: it has none)."""
    return sum_by(samples, name, ("pool",)).get((POOL,))


def guard_verdicts(samples: Mapping[SampleKey, float]) -> tuple[tuple[str, float], ...]:
    """Counter increases of the ITL guard by verdict: every verdict of `VERDICTS` (0 when not
    seen) and then any other verdict label seen, sorted."""
    seen = {k[0]: v for k, v in sum_by(samples, GUARD, ("verdict",)).items()}
    names = list(VERDICTS) + sorted(set(seen) - set(VERDICTS))
    return tuple((name, seen.get(name, 0.0)) for name in names)


def decode_stall(delta: Delta | None) -> DecodeStall | None:
    """The window's decode stall and guard verdicts (see the module contract)."""
    if delta is None:
        return None
    s = delta.samples
    stall_buckets = buckets_by(s, STALL, ("pool",)).get((POOL,), {})
    stream_steps = _decode_only(s, f"{STALL}_count")
    return DecodeStall(
        span_s=delta.span_s,
        stream_steps=stream_steps or 0.0,
        stalled_s=_decode_only(s, f"{STALL}_sum") or 0.0,
        p99_s=histogram_quantile(0.99, stall_buckets),
        itl_p99_s=quantile_of(0.99, s, ITL),
        verdicts=guard_verdicts(s),
        reported=stream_steps is not None,
    )
