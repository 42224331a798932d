"""One scrape of the router: its /metrics samples and its /v1/pdserve/replicas document (pure).

A `Scrape` maps (sample name, sorted label pairs) to a value, e.g.
("pdserve_requests_total", (("decision", "none"), ("endpoint", "chat"), ("status", "200"))).
`_created` samples are dropped: they are timestamps, not counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]
SampleKey = tuple[str, Labels]


@dataclass(frozen=True)
class Scrape:
    """Samples taken at `t_s` (monotonic seconds); `replicas` is the replicas JSON or None."""

    t_s: float
    samples: Mapping[SampleKey, float]
    replicas: Mapping[str, Any] | None = field(default=None)


def parse_metrics(text: str) -> dict[SampleKey, float]:
    """Parse Prometheus text exposition into flat samples; raises ValueError if malformed."""
    samples: dict[SampleKey, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return samples


def label_values(labels: Labels, names: tuple[str, ...]) -> tuple[str, ...]:
    """The values of `names` in `labels` ("" for a missing label), in the order of `names`."""
    as_dict = dict(labels)
    return tuple(as_dict.get(n, "") for n in names)


def sum_by(
    samples: Mapping[SampleKey, float], name: str, by: tuple[str, ...] = ()
) -> dict[tuple[str, ...], float]:
    """Sum the samples called `name`, grouped by the label names `by` (like PromQL `sum by`).

    With `by=()` the result has the single key () (absent when no sample has that name).
    """
    out: dict[tuple[str, ...], float] = {}
    for (sample_name, labels), value in samples.items():
        if sample_name == name:
            key = label_values(labels, by)
            out[key] = out.get(key, 0.0) + value
    return out


def total(samples: Mapping[SampleKey, float], name: str) -> float:
    """Sum of every sample called `name` (0.0 when there is none)."""
    return sum_by(samples, name).get((), 0.0)
