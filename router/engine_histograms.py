"""Histograms the engines measure themselves, summed per pool for the router's /metrics.

An engine keeps `BucketCounts` (pdserve.messages; cumulative since it started, fixed bounds) and
reports them in its routing stats; each router folds every replica's growth since the last
scrape into its per-pool totals (`PoolHistogram`), exposed as a Prometheus histogram by a custom
collector. A replaced replica has a new id and starts from its own counts, so the totals never
decrease. Pure except for the prometheus_client metric family it yields.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client.core import HistogramMetricFamily

from pdserve.messages import BucketCounts


class PoolHistogram:
    """One engine-measured histogram, summed per pool over the replicas' reports."""

    def __init__(self, name: str, documentation: str, bounds: tuple[float, ...]) -> None:
        self.name = name
        self._doc = documentation
        self._bounds = bounds
        self._totals: dict[str, BucketCounts] = {}
        self._seen: dict[str, tuple[list[int], float]] = {}

    def fold(self, pool: str, replica_id: str, report: Any) -> None:
        """Add the growth of one replica's cumulative report since the last fold (a report
        that is missing or shaped for other bounds is ignored)."""
        if not isinstance(report, dict):
            return
        counts, total = report.get("counts"), report.get("sum")
        if not isinstance(counts, list) or len(counts) != len(self._bounds) + 1:
            return
        before_counts, before_sum = self._seen.get(replica_id, ([0] * len(counts), 0.0))
        self._seen[replica_id] = (list(counts), float(total or 0.0))
        pool_total = self._totals.setdefault(pool, BucketCounts(self._bounds))
        for i, (now, then) in enumerate(zip(counts, before_counts, strict=True)):
            pool_total.counts[i] += max(0, int(now) - int(then))
        pool_total.sum += max(0.0, float(total or 0.0) - before_sum)

    def forget(self, live_replica_ids: set[str]) -> None:
        """Drop the memory of replicas that are gone (their growth is already counted)."""
        for gone in set(self._seen) - live_replica_ids:
            del self._seen[gone]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self._doc, labels=["pool"])
        for pool, h in sorted(self._totals.items()):
            cumulative, running = [], 0
            for bound, n in zip((*self._bounds, float("inf")), h.counts, strict=True):
                running += n
                cumulative.append(("+Inf" if bound == float("inf") else repr(bound), running))
            family.add_metric([pool], cumulative, sum_value=h.sum)
        yield family

    def describe(self) -> Sequence[HistogramMetricFamily]:
        return [HistogramMetricFamily(self.name, self._doc, labels=["pool"])]
