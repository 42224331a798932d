"""`pdserve tune`'s search (pure): the configurations a device budget allows, each simulated
under the workload, ranked by goodput at the SLOs.

Candidates: aggregated with 1..N engines, and every xPyD with x + y <= N, each engine on a
device of its own (a core on CPU, its GPUs on cuda); for each, every prefill chunk size
asked for and (disaggregated) every local-prefill threshold. Ranking: highest goodput (the
fraction of requests meeting both SLOs): candidates that reach `target_goodput` (and stay
within the optional TTFT p99 / ITL p99 bounds) come first, fewest devices first, then lowest
TTFT p99, where TTFT p99s within `P99_TIE` of the lowest among them count as equal and the
lower typical TTFT goes first (`typical_ttft_s`: the TTFT p50, per request class when the
workload has classes; the simulator's p99s move by a few percent with its random draws, so
smaller differences say nothing); the rest follow by goodput.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import Metrics
from pdserve.bench.trace import TraceRecord
from pdserve.config import PdserveConfig
from pdserve.sim.layout import layout_from_config
from pdserve.sim.predict import Prediction, predict
from pdserve.sim.profile import SimProfile

P99_TIE = 0.05
"""TTFT p99s within this fraction of each other rank as equal (then by `typical_ttft_s`)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One point of the search: a layout and its two knobs."""

    mode: str
    num_prefill: int
    num_decode: int
    chunk_tokens: int | None
    local_prefill_max_cold_tokens: int

    @property
    def num_devices(self) -> int:
        return self.num_prefill + self.num_decode

    def label(self) -> str:
        shape = (
            f"aggregated x{self.num_decode}"
            if self.mode == "aggregated"
            else f"{self.num_prefill}P{self.num_decode}D"
        )
        chunk = "whole" if self.chunk_tokens is None else str(self.chunk_tokens)
        local = "" if self.mode == "aggregated" else f", local<{self.local_prefill_max_cold_tokens}"
        return f"{shape} (chunk {chunk}{local})"


def candidates(
    num_devices: int,
    chunk_tokens: Sequence[int | None],
    local_thresholds: Sequence[int],
    *,
    aggregated: bool = True,
) -> list[Candidate]:
    """Every candidate within `num_devices` (>= 1; 2 for any disaggregated one)."""
    if num_devices < 1:
        raise ValueError(f"the device budget must be >= 1, got {num_devices}")
    out = []
    for chunk in chunk_tokens:
        if aggregated:
            out += [Candidate("aggregated", 0, n, chunk, 0) for n in range(1, num_devices + 1)]
        for p in range(1, num_devices):
            for d in range(1, num_devices - p + 1):
                out += [Candidate("disaggregated", p, d, chunk, t) for t in local_thresholds]
    return out


def apply(base: PdserveConfig, c: Candidate) -> PdserveConfig:
    """`base` turned into candidate `c`: mode, fixed replica counts (autoscaling off), one
    device per engine, the chunk size on every pool's engines and the local-prefill
    threshold. Everything else (model, engine budgets, router) is the base's."""
    raw: dict[str, Any] = base.model_dump(mode="json")
    cores = iter(range(c.num_devices))

    def pool(name: str, count: int) -> dict[str, Any]:
        p = dict(raw[name])
        p["num_replicas"] = count
        p["autoscaling"] = None
        engine = dict(p["engine"])
        engine["prefill_chunk_tokens"] = c.chunk_tokens
        p["engine"] = engine
        if base.platform == "cpu":
            p["cpu_cores"] = None
            p["cpu_cores_per_replica"] = [[next(cores)] for _ in range(count)]
        else:
            p["num_gpus"] = max(1, engine.get("tensor_parallel_size", 1))
        return p

    raw["mode"] = c.mode
    if c.mode == "aggregated":
        raw.pop("prefill")
    else:
        raw["prefill"] = pool("prefill", c.num_prefill)
    raw["decode"] = pool("decode", c.num_decode)
    routing = dict(raw["router"]["routing"])
    routing["local_prefill_max_cold_tokens"] = c.local_prefill_max_cold_tokens
    raw["router"] = {**raw["router"], "routing": routing}
    return PdserveConfig.model_validate(raw)


@dataclass(frozen=True, slots=True)
class Ranked:
    candidate: Candidate
    config: PdserveConfig
    prediction: Prediction


@dataclass(frozen=True, slots=True)
class Scored:
    """What the ranking reads of one option (a predicted candidate or a measured
    deployment): its metrics over all requests and per request class, and its devices."""

    metrics: Metrics
    classes: Mapping[str, Metrics]
    num_devices: int


def typical_ttft_s(prediction: Prediction | Scored) -> float | None:
    """The TTFT a tie is broken by: with two or more request classes, the geometric mean of
    the classes' TTFT p50s (each class counts the same whatever its share, and a 2x faster
    short request weighs as much as a 2x faster long one; the p50 of a half-short, half-long
    workload falls in the gap between the two and moves with whichever class is nearer it);
    otherwise all requests' TTFT p50. None when a needed p50 is missing or not above 0."""
    classes = prediction.classes
    if len(classes) < 2:
        return prediction.metrics.ttft_p50_s
    p50s = [m.ttft_p50_s for m in classes.values()]
    if any(p is None or p <= 0 for p in p50s):
        return None
    return math.exp(sum(math.log(p) for p in p50s if p is not None) / len(p50s))


def meets(
    m: Metrics,
    target_goodput: float,
    max_ttft_p99_s: float | None = None,
    max_itl_p99_s: float | None = None,
) -> bool:
    """Goodput at least `target_goodput`, and TTFT / ITL p99 within the bounds given."""
    if (m.goodput_fraction or 0.0) < target_goodput:
        return False
    if max_ttft_p99_s is not None and (m.ttft_p99_s is None or m.ttft_p99_s > max_ttft_p99_s):
        return False
    return max_itl_p99_s is None or (m.itl_p99_s is not None and m.itl_p99_s <= max_itl_p99_s)


def meets_target(
    r: Ranked,
    target_goodput: float,
    max_ttft_p99_s: float | None = None,
    max_itl_p99_s: float | None = None,
) -> bool:
    """`meets` for a ranked candidate's predicted metrics."""
    return meets(r.prediction.metrics, target_goodput, max_ttft_p99_s, max_itl_p99_s)


T = TypeVar("T")


def order(
    options: Sequence[T],
    scored: Callable[[T], Scored],
    *,
    target_goodput: float = 0.99,
    max_ttft_p99_s: float | None = None,
    max_itl_p99_s: float | None = None,
) -> list[T]:
    """`options` best first by the module docstring's rule, each read through `scored`: those
    that meet the target first, fewest devices first, then lowest TTFT p99 (within P99_TIE of
    each other: lower typical TTFT first); the rest by goodput. Stable."""

    def key(o: T) -> tuple[bool, float, int, float]:
        s = scored(o)
        ok = meets(s.metrics, target_goodput, max_ttft_p99_s, max_itl_p99_s)
        goodput = s.metrics.goodput_fraction or 0.0
        return (not ok, 0.0 if ok else -goodput, s.num_devices, s.metrics.ttft_p99_s or 1e9)

    keyed = sorted(((key(o), o) for o in options), key=lambda ko: ko[0])
    runs: list[tuple[tuple[bool, float, int, float], list[T]]] = []
    for k, o in keyed:
        if runs and runs[-1][0][:3] == k[:3] and k[3] <= runs[-1][0][3] * (1 + P99_TIE):
            runs[-1][1].append(o)
        else:
            runs.append((k, [o]))
    return [
        o for _, run in runs for o in sorted(run, key=lambda o: typical_ttft_s(scored(o)) or 1e9)
    ]


def rank(
    base: PdserveConfig,
    profile: SimProfile,
    workload: BenchConfig,
    points: Sequence[Candidate],
    trace: Sequence[TraceRecord] = (),
    *,
    target_goodput: float = 0.99,
    max_ttft_p99_s: float | None = None,
    max_itl_p99_s: float | None = None,
    runs: int | None = None,
) -> list[Ranked]:
    """Simulate every candidate (`runs` pooled simulations each; None = `default_runs`) and
    sort best first (`order`)."""
    ranked = []
    for c in points:
        cfg = apply(base, c)
        layout = layout_from_config(cfg, name=c.label())
        ranked.append(
            Ranked(c, cfg, predict(c.label(), layout, profile, workload, trace, runs=runs))
        )
    return order(
        ranked,
        lambda r: Scored(r.prediction.metrics, r.prediction.classes, r.candidate.num_devices),
        target_goodput=target_goodput,
        max_ttft_p99_s=max_ttft_p99_s,
        max_itl_p99_s=max_itl_p99_s,
    )
