"""The simulator checked where a check means something on a noisy machine: ratios between
layouts measured side by side in one run, and whether the layout the tuner would recommend is
the measured best (pure).

Absolute latencies on a shared CPU host move tens of percent between hours; the ratio of two
layouts measured in the same run mostly does not, and it is the question a user asks of the
tuner ("how much better is 2P1D than aggregated here?"). For each workload, each layout is
set against a baseline layout of the same run, for the TTFT p50 and p99 of each request class
and the ITL p99, predicted and measured; and the layouts are ordered by `pdserve tune`'s own
rule (pdserve.sim.search.order) on the predicted and on the measured metrics.

Who calls it: `pdserve sim-check` (check_cli.py) and its tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pdserve.bench.report import Metrics, PolicyReport
from pdserve.sim.predict import Prediction
from pdserve.sim.search import Scored, order

TIE = 0.05
"""A ratio within this of 1 counts as "no difference" when directions are compared."""
RATIO_METRICS = (("TTFT p50", "ttft_p50_s"), ("TTFT p99", "ttft_p99_s"))
"""Compared per request class (all requests when the workload has none)."""
STREAM_METRICS = (("ITL p99", "itl_p99_s"),)
"""Compared over all requests (a stream's gaps do not depend on its prompt's class)."""


def direction(ratio: float | None) -> int | None:
    """-1 (lower than the baseline by more than TIE), 0 (within TIE), +1, None without one."""
    if ratio is None or ratio <= 0:
        return None
    if abs(math.log(ratio)) <= math.log1p(TIE):
        return 0
    return -1 if ratio < 1 else 1


@dataclass(frozen=True, slots=True)
class RatioRow:
    """One metric of one layout against the baseline, in one workload: layout / baseline,
    measured and predicted (by each profile the check used, by label)."""

    workload: str
    layout: str
    baseline: str
    scope: str
    metric: str
    measured: float | None
    predicted: Mapping[str, float | None]

    def error(self, profile: str) -> float | None:
        """Predicted ratio / measured ratio (1 = the simulator got the ratio exactly)."""
        p = self.predicted.get(profile)
        if p is None or self.measured is None or self.measured <= 0:
            return None
        return p / self.measured

    def same_direction(self, profile: str) -> bool | None:
        """Whether the prediction says what the measurement says: better, worse or the same
        as the baseline (within TIE)."""
        got, want = direction(self.predicted.get(profile)), direction(self.measured)
        return None if got is None or want is None else got == want

    def opposite(self, profile: str) -> bool | None:
        """Whether the prediction says better where the measurement says worse, or the
        other way round (beyond TIE on both sides)."""
        got, want = direction(self.predicted.get(profile)), direction(self.measured)
        return None if got is None or want is None else got * want < 0


@dataclass(frozen=True, slots=True)
class RankRow:
    """One workload's layouts best first: measured, and predicted by each profile."""

    workload: str
    measured: tuple[str, ...]
    predicted: Mapping[str, tuple[str, ...]]

    def picks_best(self, profile: str) -> bool:
        """Whether the layout the tuner would recommend is the measured best."""
        got = self.predicted.get(profile, ())
        return bool(got) and bool(self.measured) and got[0] == self.measured[0]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def _value(m: Metrics | None, field: str) -> float | None:
    value = getattr(m, field) if m is not None else None
    return None if value is None else float(value)


def _scopes(measured: PolicyReport) -> list[str]:
    return sorted(measured.classes or {}, reverse=True) or ["all"]


def _of(m: Metrics, classes: Mapping[str, Metrics], scope: str) -> Metrics | None:
    return m if scope == "all" else classes.get(scope)


def ratio_rows(
    workload: str,
    baseline: str,
    measured: Mapping[str, PolicyReport],
    predicted: Mapping[str, Mapping[str, Prediction]],
) -> list[RatioRow]:
    """Every layout of `measured` but `baseline`, against it: TTFT p50 and p99 per request
    class (the measured run's classes), then ITL p99. `predicted`: profile label -> layout
    name -> prediction of that layout for this workload."""
    base = measured[baseline]
    rows = []
    for name, m in measured.items():
        if name == baseline:
            continue
        cells = [(s, label, f) for s in _scopes(base) for label, f in RATIO_METRICS]
        cells += [("all", label, f) for label, f in STREAM_METRICS]
        for scope, label, field in cells:
            got = _ratio(
                _value(_of(m, m.classes or {}, scope), field),
                _value(_of(base, base.classes or {}, scope), field),
            )
            want: dict[str, float | None] = {}
            for profile, preds in predicted.items():
                p, pb = preds.get(name), preds.get(baseline)
                want[profile] = (
                    None
                    if p is None or pb is None
                    else _ratio(
                        _value(_of(p.metrics, p.classes, scope), field),
                        _value(_of(pb.metrics, pb.classes, scope), field),
                    )
                )
            rows.append(RatioRow(workload, name, baseline, scope, label, got, want))
    return rows


def rank_row(
    workload: str,
    measured: Mapping[str, PolicyReport],
    predicted: Mapping[str, Mapping[str, Prediction]],
    num_devices: Mapping[str, int],
    *,
    target_goodput: float,
) -> RankRow:
    """The layouts of `measured` ordered by the tuner's rule on the measured metrics and on
    each profile's predictions (`num_devices`: each layout's devices, as the tuner counts
    them)."""
    names = list(measured)
    measured_of = {n: (r, r.classes or {}) for n, r in measured.items()}
    best = order(names, _scorer(measured_of, num_devices), target_goodput=target_goodput)
    by_profile = {}
    for profile, preds in predicted.items():
        scored = _scorer({n: (p.metrics, p.classes) for n, p in preds.items()}, num_devices)
        have = [n for n in names if n in preds]
        by_profile[profile] = tuple(order(have, scored, target_goodput=target_goodput))
    return RankRow(workload, tuple(best), by_profile)


def _scorer(
    metrics: Mapping[str, tuple[Metrics, Mapping[str, Metrics]]], num_devices: Mapping[str, int]
) -> Callable[[str], Scored]:
    """Reads a layout's metrics and per-class metrics (a measured report's, or a
    prediction's) for the ranking."""

    def scored(name: str) -> Scored:
        m, classes = metrics[name]
        return Scored(m, classes, num_devices[name])

    return scored


@dataclass(frozen=True, slots=True)
class Summary:
    """Counts over a check, per profile: ratio cells whose direction the prediction got
    (better, worse, or within TIE of the baseline), those where it said the opposite (better
    where the measurement says worse, beyond TIE on both sides), and workloads whose measured
    best it picked."""

    profile: str
    cells: int
    same_direction: int
    opposite: int
    median_error: float | None
    """Median over the cells of |log(predicted / measured ratio)|, as a factor (1.10 = the
    predicted ratio is typically 10 % off the measured one)."""
    workloads: int
    best_picked: int


def summarize(profile: str, rows: Sequence[RatioRow], ranks: Sequence[RankRow]) -> Summary:
    verdicts = [v for r in rows if (v := r.same_direction(profile)) is not None]
    opposite = sum(1 for r in rows if r.opposite(profile))
    errors = sorted(abs(math.log(e)) for r in rows if (e := r.error(profile)) is not None)
    median = None
    if errors:
        mid = len(errors) // 2
        log = errors[mid] if len(errors) % 2 else (errors[mid - 1] + errors[mid]) / 2
        median = math.exp(log)
    return Summary(
        profile=profile,
        cells=len(verdicts),
        same_direction=sum(verdicts),
        opposite=opposite,
        median_error=median,
        workloads=len(ranks),
        best_picked=sum(r.picks_best(profile) for r in ranks),
    )
