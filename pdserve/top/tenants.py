"""Per-tenant usage over a scrape window, from the router's `pdserve_tenant_*` series (pure).

Used by the Tenants table of `pdserve top` and by `pdserve tenants usage`. Every tenant series
has scope "router" (router/metric_catalog.py): the samples given here are already summed over
router replicas (pdserve/top/merge.py). Tenants are the `tenant` label values of any
`pdserve_tenant_*` sample in the newest scrape (names from the key file only); no such sample,
no rows.

Totals are the window's counter increases (`Delta`), rates divide them by its span; quantiles
interpolate the histograms' bucket increases (quantile.py). In-flight is the newest gauge.
Before the window has two scrapes, a row carries the in-flight gauge only (`span_s` None).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pdserve.top.quantile import buckets_by, histogram_quantile
from pdserve.top.scrape import SampleKey, sum_by
from pdserve.top.window import Delta

PREFIX = "pdserve_tenant_"
REQUESTS = "pdserve_tenant_requests_total"
REJECTED = "pdserve_tenant_rejected_total"
TOKENS = "pdserve_tenant_tokens_total"
PREFILL_SECONDS = "pdserve_tenant_prefill_seconds_total"
KV_BLOCK_SECONDS = "pdserve_tenant_decode_kv_block_seconds_total"
TTFT = "pdserve_tenant_time_to_first_token_seconds"
ITL = "pdserve_tenant_inter_token_latency_seconds"
QUEUE_WAIT = "pdserve_tenant_queue_wait_seconds"
INFLIGHT = "pdserve_tenant_inflight_requests"
TIERS = ("prefill", "decode")


@dataclass(frozen=True)
class TenantRow:
    """One tenant over the window: totals (counter increases), quantiles, in-flight now.

    `span_s` is None until the window has two scrapes: then only `inflight` is known."""

    tenant: str
    span_s: float | None
    inflight: float | None = None
    requests: float = 0.0
    rejected: float = 0.0
    rejected_by_reason: tuple[tuple[str, float], ...] = ()
    """429s by reason, most first (reasons with no 429 in the window left out)."""
    prompt_tokens: float = 0.0
    cached_tokens: float = 0.0
    output_tokens: float = 0.0
    prefill_s: float = 0.0
    prefill_share: float | None = None
    """This tenant's share of all tenants' prefill seconds (None: none in the window)."""
    kv_block_s: float = 0.0
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p99_s: float | None = None
    queue_p99_s: tuple[tuple[str, float | None], ...] = ()
    """Fair-queue wait p99 by tier (prefill, decode, then any other tier seen)."""

    def per_s(self, increase: float) -> float | None:
        """`increase` per second over the window (None before two scrapes)."""
        if self.span_s is None:
            return None
        return increase / self.span_s if self.span_s > 0 else 0.0

    @property
    def top_reason(self) -> str | None:
        """The reason of most of the window's 429s (None: no 429)."""
        return self.rejected_by_reason[0][0] if self.rejected_by_reason else None

    def queue_p99(self, tier: str) -> float | None:
        return dict(self.queue_p99_s).get(tier)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: totals, per-second rates and quantiles (seconds)."""
        tokens = {
            "prompt": self.prompt_tokens,
            "cached": self.cached_tokens,
            "output": self.output_tokens,
        }
        return {
            "tenant": self.tenant,
            "span_s": self.span_s,
            "requests": self.requests,
            "requests_per_s": self.per_s(self.requests),
            "rejected": self.rejected,
            "rejected_per_s": self.per_s(self.rejected),
            "rejected_by_reason": dict(self.rejected_by_reason),
            "top_reject_reason": self.top_reason,
            "tokens": tokens,
            "tokens_per_s": {k: self.per_s(v) for k, v in tokens.items()},
            "prefill_seconds": self.prefill_s,
            "prefill_seconds_per_s": self.per_s(self.prefill_s),
            "prefill_share": self.prefill_share,
            "decode_kv_block_seconds": self.kv_block_s,
            "decode_kv_block_seconds_per_s": self.per_s(self.kv_block_s),
            "ttft_p50_s": self.ttft_p50_s,
            "ttft_p99_s": self.ttft_p99_s,
            "itl_p99_s": self.itl_p99_s,
            "queue_wait_p99_s": dict(self.queue_p99_s),
            "inflight_requests": self.inflight,
        }


def tenant_names(samples: Mapping[SampleKey, float]) -> list[str]:
    """Every `tenant` label value of a `pdserve_tenant_*` sample, sorted."""
    names = {
        value
        for (name, labels) in samples
        if name.startswith(PREFIX)
        for label, value in labels
        if label == "tenant" and value
    }
    return sorted(names)


def _by_tenant(samples: Mapping[SampleKey, float], name: str) -> dict[str, float]:
    return {k[0]: v for k, v in sum_by(samples, name, ("tenant",)).items()}


def _ordered_tiers(tiers: set[str]) -> list[str]:
    return [t for t in TIERS if t in tiers] + sorted(tiers - set(TIERS))


def tenant_rows(gauges: Mapping[SampleKey, float], d: Delta | None) -> tuple[TenantRow, ...]:
    """One row per tenant of the newest scrape (`gauges`), with the window's deltas `d` (None:
    one scrape so far, in-flight only). Empty when the router exports no tenant series."""
    names = tenant_names(gauges)
    inflight = _by_tenant(gauges, INFLIGHT)
    if d is None:
        return tuple(TenantRow(t, None, inflight.get(t)) for t in names)
    s = d.samples
    requests = _by_tenant(s, REQUESTS)
    rejected = sum_by(s, REJECTED, ("tenant", "reason"))
    tokens = sum_by(s, TOKENS, ("tenant", "kind"))
    prefill = _by_tenant(s, PREFILL_SECONDS)
    kv = _by_tenant(s, KV_BLOCK_SECONDS)
    ttft = buckets_by(s, TTFT, ("tenant",))
    itl = buckets_by(s, ITL, ("tenant",))
    queue = buckets_by(s, QUEUE_WAIT, ("tenant", "tier"))
    all_prefill = sum(prefill.get(t, 0.0) for t in names)
    rows = []
    for t in names:
        reasons = sorted(
            ((reason, n) for (tenant, reason), n in rejected.items() if tenant == t and n > 0),
            key=lambda rn: (-rn[1], rn[0]),
        )
        tiers = _ordered_tiers({tier for (tenant, tier) in queue if tenant == t})
        rows.append(
            TenantRow(
                tenant=t,
                span_s=d.span_s,
                inflight=inflight.get(t),
                requests=requests.get(t, 0.0),
                rejected=sum((n for _, n in reasons), 0.0),
                rejected_by_reason=tuple(reasons),
                prompt_tokens=tokens.get((t, "prompt"), 0.0),
                cached_tokens=tokens.get((t, "cached"), 0.0),
                output_tokens=tokens.get((t, "output"), 0.0),
                prefill_s=prefill.get(t, 0.0),
                prefill_share=prefill.get(t, 0.0) / all_prefill if all_prefill > 0 else None,
                kv_block_s=kv.get(t, 0.0),
                ttft_p50_s=histogram_quantile(0.5, ttft.get((t,), {})),
                ttft_p99_s=histogram_quantile(0.99, ttft.get((t,), {})),
                itl_p99_s=histogram_quantile(0.99, itl.get((t,), {})),
                queue_p99_s=tuple(
                    (tier, histogram_quantile(0.99, queue[(t, tier)])) for tier in tiers
                ),
            )
        )
    return tuple(rows)
