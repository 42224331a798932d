"""Everything `pdserve top` shows, as plain data built from a scrape window (pure).

`build_view` reads gauges from the newest scrape, per-replica rows from its replicas document,
and rates/quantiles from the window's deltas (None/empty until the window has two scrapes).
Quantiles are Prometheus-style bucket interpolations (see quantile.py); rates are per second
over the window's actual span.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pdserve.names import POOLS
from pdserve.router.metric_catalog import DECISIONS, INPUT_BUCKETS
from pdserve.top.bandwidth import (
    BandwidthVerdict,
    FabricPoint,
    KvBandwidth,
    bandwidth_verdict,
    kv_bandwidth,
)
from pdserve.top.quantile import buckets_by, histogram_quantile, quantile_of
from pdserve.top.scrape import SampleKey, sum_by, total
from pdserve.top.stall import DecodeStall, decode_stall
from pdserve.top.tenants import TenantRow, tenant_rows
from pdserve.top.window import ScrapeWindow

TTFT = "pdserve_time_to_first_token_seconds"
PREFILL = "pdserve_prefill_time_seconds"
QUEUE = "pdserve_queue_time_seconds"
KV_SECONDS = "pdserve_kv_transfer_seconds"
ITL = "pdserve_inter_token_latency_seconds"
REQUESTS = "pdserve_requests_total"


@dataclass(frozen=True)
class PoolRow:
    """The `pdserve_pool_*` gauges of one pool (None: not exported yet)."""

    pool: str
    ready_replicas: float | None
    running_requests: float | None
    queued_prefill_tokens: float | None
    kv_cache_usage: float | None


@dataclass(frozen=True)
class ReplicaRow:
    """One replica as the router sees it (GET /v1/pdserve/replicas)."""

    pool: str
    replica_id: str
    running: int
    waiting: int
    kv_cache_usage: float
    cached_blocks: int
    kv_events: bool


@dataclass(frozen=True)
class ScalingRow:
    """One elastic pool's autoscaler (the `scaling` entry of /v1/pdserve/replicas)."""

    pool: str
    current_replicas: int
    target_replicas: int
    wanted_replicas: int
    signal: float
    signal_target: float


@dataclass(frozen=True)
class EventRow:
    """One scale event: Ray Serve's target for `pool` went from one count to another."""

    unix_s: float
    pool: str
    from_replicas: int
    to_replicas: int
    reason: str


@dataclass(frozen=True)
class TtftRow:
    """TTFT of one input bucket over the window, decisions summed; prefill p50 beside it."""

    input_bucket: str
    requests: float
    p50_s: float | None
    p99_s: float | None
    prefill_p50_s: float | None


@dataclass(frozen=True)
class RateRow:
    """A label value (decision, status) and its per-second rate over the window."""

    label: str
    per_s: float


@dataclass(frozen=True)
class TopView:
    """One screen. `span_s` is None until two scrapes exist (then rates are empty/None)."""

    scrapes: int
    span_s: float | None
    pools: tuple[PoolRow, ...]
    replicas: tuple[ReplicaRow, ...]
    replicas_note: str | None
    ttft: tuple[TtftRow, ...] = ()
    queue_p50_s: float | None = None
    prefill_p50_s: float | None = None
    kv_transfer_p50_s: float | None = None
    kv_transfer_p99_s: float | None = None
    itl_p99_s: float | None = None
    kv: KvBandwidth | None = None
    transfers_per_s: float | None = None
    verdict: BandwidthVerdict | None = None
    decisions: tuple[RateRow, ...] = ()
    statuses: tuple[RateRow, ...] = ()
    request_rate: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    rejected_per_s: float | None = None
    """429s from admission control, per second (`pdserve_requests_rejected_total`)."""
    fallbacks_per_s: float | None = None
    """Requests moved off a failed stage, per second (`pdserve_fallbacks_total`)."""
    scaling: tuple[ScalingRow, ...] = ()
    scale_events: tuple[EventRow, ...] = ()
    """The most recent scale events of every elastic pool, newest first."""
    kv_checks_per_s: float | None = None
    """KV handoffs checked per second (`pdserve_kv_integrity_checks_total`)."""
    kv_integrity_failures: tuple[RateRow, ...] = ()
    """Handoffs not used (recomputed) per second, by reason."""
    tenants: tuple[TenantRow, ...] = ()
    """Per-tenant usage over the window (pdserve/top/tenants.py); empty without tenant series."""
    decode_stall: DecodeStall | None = None
    """The decode streams' wait on prefill-carrying steps and the ITL guard's verdicts over the
    window (pdserve/top/stall.py); None until two scrapes."""


def _ordered(keys: Iterable[str], preferred: tuple[str, ...]) -> list[str]:
    """`keys` with those in `preferred` first (in its order), the rest sorted."""
    present = set(keys)
    return [k for k in preferred if k in present] + sorted(present - set(preferred))


def pool_rows(gauges: Mapping[SampleKey, float]) -> tuple[PoolRow, ...]:
    """Per-pool gauge rows (prefill, decode, then any other pool label)."""
    by_name = {
        name: {k[0]: v for k, v in sum_by(gauges, f"pdserve_pool_{name}", ("pool",)).items()}
        for name in ("ready_replicas", "running_requests", "queued_prefill_tokens")
    }
    usage = {
        k[0]: v for k, v in sum_by(gauges, "pdserve_pool_kv_cache_usage_ratio", ("pool",)).items()
    }
    pools = _ordered({p for values in (*by_name.values(), usage) for p in values}, POOLS)
    return tuple(
        PoolRow(
            pool=p,
            ready_replicas=by_name["ready_replicas"].get(p),
            running_requests=by_name["running_requests"].get(p),
            queued_prefill_tokens=by_name["queued_prefill_tokens"].get(p),
            kv_cache_usage=usage.get(p),
        )
        for p in pools
    )


def replica_rows(doc: Mapping[str, Any] | None) -> tuple[tuple[ReplicaRow, ...], str | None]:
    """Rows from a replicas document, and a note when there are none to show."""
    if doc is None:
        return (), "replica view unavailable (GET /v1/pdserve/replicas failed)"
    pools = doc.get("pools")
    if not isinstance(pools, dict):
        return (), "replica view has no `pools`"
    rows = []
    for pool in _ordered(pools, POOLS):
        entries = pools[pool] if isinstance(pools[pool], list) else []
        for r in sorted(
            (e for e in entries if isinstance(e, dict)), key=lambda e: str(e.get("replica_id"))
        ):
            rows.append(
                ReplicaRow(
                    pool=pool,
                    replica_id=str(r.get("replica_id", "?")),
                    running=int(r.get("running", 0)),
                    waiting=int(r.get("waiting", 0)),
                    kv_cache_usage=float(r.get("kv_cache_usage", 0.0)),
                    cached_blocks=int(r.get("cached_blocks", 0)),
                    kv_events=bool(r.get("kv_events", False)),
                )
            )
    note = None if rows else "no replicas attached yet (router still starting?)"
    return tuple(rows), note


def scaling_rows(
    doc: Mapping[str, Any] | None, max_events: int = 5
) -> tuple[tuple[ScalingRow, ...], tuple[EventRow, ...]]:
    """The elastic pools' autoscaler rows and their latest `max_events` scale events (newest
    first) from a replicas document; empty when no pool autoscales on pdserve's policy."""
    scaling = doc.get("scaling") if doc is not None else None
    if not isinstance(scaling, dict):
        return (), ()
    rows, events = [], []
    for pool in _ordered(scaling, POOLS):
        s = scaling[pool]
        if not isinstance(s, dict):
            continue
        rows.append(
            ScalingRow(
                pool=pool,
                current_replicas=int(s.get("current_replicas", 0)),
                target_replicas=int(s.get("target_replicas", 0)),
                wanted_replicas=int(s.get("wanted_replicas", 0)),
                signal=float(s.get("signal", 0.0)),
                signal_target=float(s.get("signal_target", 0.0)),
            )
        )
        for e in s.get("events") or ():
            if isinstance(e, dict):
                events.append(
                    EventRow(
                        unix_s=float(e.get("unix_s", 0.0)),
                        pool=pool,
                        from_replicas=int(e.get("from_replicas", 0)),
                        to_replicas=int(e.get("to_replicas", 0)),
                        reason=str(e.get("reason", "")),
                    )
                )
    events.sort(key=lambda e: e.unix_s, reverse=True)
    return tuple(rows), tuple(events[:max_events])


def ttft_rows(delta: Mapping[SampleKey, float]) -> tuple[TtftRow, ...]:
    """One row per input bucket with TTFT observations in the window."""
    ttft = buckets_by(delta, TTFT, ("input_bucket",))
    prefill = buckets_by(delta, PREFILL, ("input_bucket",))
    counts = {k[0]: v for k, v in sum_by(delta, f"{TTFT}_count", ("input_bucket",)).items()}
    rows = []
    for bucket in _ordered((b for b, n in counts.items() if n > 0), INPUT_BUCKETS):
        hist = ttft.get((bucket,), {})
        rows.append(
            TtftRow(
                input_bucket=bucket,
                requests=counts[bucket],
                p50_s=histogram_quantile(0.5, hist),
                p99_s=histogram_quantile(0.99, hist),
                prefill_p50_s=histogram_quantile(0.5, prefill.get((bucket,), {})),
            )
        )
    return tuple(rows)


def rate_rows(
    delta: Mapping[SampleKey, float], label: str, span_s: float, preferred: tuple[str, ...] = ()
) -> tuple[RateRow, ...]:
    """Per-second `pdserve_requests_total` by one label, every value seen (also at 0/s)."""
    increases = {k[0]: v for k, v in sum_by(delta, REQUESTS, (label,)).items()}
    return tuple(
        RateRow(value, increases[value] / span_s if span_s > 0 else 0.0)
        for value in _ordered(increases, preferred)
    )


INTEGRITY_REASONS = ("digest", "identity", "stale", "unverifiable")


def integrity_rows(delta: Mapping[SampleKey, float], span_s: float) -> tuple[RateRow, ...]:
    """Per-second `pdserve_kv_integrity_failures_total` by reason (every reason seen)."""
    failures = sum_by(delta, "pdserve_kv_integrity_failures_total", ("reason",))
    increases = {k[0]: v for k, v in failures.items()}
    return tuple(
        RateRow(reason, increases[reason] / span_s if span_s > 0 else 0.0)
        for reason in _ordered(increases, INTEGRITY_REASONS)
    )


def build_view(
    window: ScrapeWindow,
    fabric: tuple[FabricPoint, ...] | None = None,
    warn_fraction: float = 0.25,
) -> TopView:
    """The screen for the window's current contents (an empty window gives an empty view)."""
    newest = window.newest
    if newest is None:
        return TopView(0, None, (), (), "no scrape yet")
    replicas, note = replica_rows(newest.replicas)
    pools = pool_rows(newest.samples)
    seen = {p.pool for p in pools}
    pools += tuple(
        PoolRow(pool, None, None, None, None)
        for pool in dict.fromkeys(r.pool for r in replicas)
        if pool not in seen
    )
    scaling, events = scaling_rows(newest.replicas)
    d = window.delta()
    tenants = tenant_rows(newest.samples, d)
    base = TopView(
        len(window), None, pools, replicas, note, scaling=scaling, scale_events=events,
        tenants=tenants,
    )  # fmt: skip
    if d is None:
        return base
    s = d.samples
    kv = kv_bandwidth(s)
    return TopView(
        scrapes=len(window),
        span_s=d.span_s,
        pools=base.pools,
        replicas=base.replicas,
        replicas_note=base.replicas_note,
        ttft=ttft_rows(s),
        queue_p50_s=quantile_of(0.5, s, QUEUE),
        prefill_p50_s=quantile_of(0.5, s, PREFILL),
        kv_transfer_p50_s=quantile_of(0.5, s, KV_SECONDS),
        kv_transfer_p99_s=quantile_of(0.99, s, KV_SECONDS),
        itl_p99_s=quantile_of(0.99, s, ITL),
        kv=kv,
        transfers_per_s=d.rate(total(s, "pdserve_kv_transfers_total")),
        verdict=bandwidth_verdict(kv, fabric, warn_fraction),
        decisions=rate_rows(s, "decision", d.span_s, DECISIONS),
        statuses=rate_rows(s, "status", d.span_s),
        request_rate=d.rate(total(s, REQUESTS)),
        prompt_tokens_per_s=d.rate(total(s, "pdserve_prompt_tokens_total")),
        generation_tokens_per_s=d.rate(total(s, "pdserve_generation_tokens_total")),
        rejected_per_s=d.rate(total(s, "pdserve_requests_rejected_total")),
        fallbacks_per_s=d.rate(total(s, "pdserve_fallbacks_total")),
        scaling=base.scaling,
        scale_events=base.scale_events,
        kv_checks_per_s=d.rate(total(s, "pdserve_kv_integrity_checks_total")),
        kv_integrity_failures=integrity_rows(s, d.span_s),
        tenants=tenants,
        decode_stall=decode_stall(d),
    )
