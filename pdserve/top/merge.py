"""Several router replicas' /metrics into one set of samples, as Prometheus would aggregate
them (pure).

Each series' scope comes from router/metric_catalog.py (`MetricScope`): a "router" series is
each replica's own share (requests it served, its memory), so the cluster's value is the sum
over replicas; a "cluster" series (copied from the engines' routing stats or the autoscaler's
journal) is the same in every replica, so the merge takes the largest (the freshest of the
counters) instead of counting it once per router. Samples outside the catalog (the process's
own python_* and process_* series) are summed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pdserve.router.metric_catalog import CATALOG, MetricScope, MetricSpec
from pdserve.top.scrape import SampleKey


def _exposed(spec: MetricSpec) -> tuple[str, ...]:
    if spec.type == "counter":
        return (f"{spec.name}_total",)
    if spec.type == "histogram":
        return tuple(f"{spec.name}_{s}" for s in ("bucket", "sum", "count"))
    return (spec.name,)


SCOPES: dict[str, MetricScope] = {name: spec.scope for spec in CATALOG for name in _exposed(spec)}
"""Scope of each sample name the router exports."""


def merge_routers(per_router: Sequence[Mapping[SampleKey, float]]) -> dict[SampleKey, float]:
    """One sample set from the routers' sample sets: sum of "router" series, max of "cluster"
    series, key by key (a series one router lacks counts as absent there, not as 0 for max)."""
    merged: dict[SampleKey, float] = {}
    for samples in per_router:
        for key, value in samples.items():
            if key not in merged:
                merged[key] = value
            elif SCOPES.get(key[0], "router") == "cluster":
                merged[key] = max(merged[key], value)
            else:
                merged[key] += value
    return merged
