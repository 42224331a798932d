"""The `mixed` workload: short and long prompts, the long ones in bursts (pure).

Head-of-line blocking shows when a few long prefills arrive together among short requests,
so long requests come in runs of `burst_size` spread evenly through the shorts; with a
request rate, a burst's requests share one arrival time.
"""

from __future__ import annotations

import random

from pdserve.bench.config import BenchConfig
from pdserve.bench.distributions import poisson_arrivals
from pdserve.bench.models import RequestSpec
from pdserve.bench.prompts import PromptFactory

SHORT = "short"
LONG = "long"


def mixed_classes(num_requests: int, long_fraction: float, burst_size: int) -> list[str]:
    """The class of each request in send order: round(n x fraction) longs in runs of
    `burst_size` (the last run may be shorter), shorts split evenly before, between and after."""
    num_long = round(num_requests * long_fraction)
    num_short = num_requests - num_long
    bursts = [min(burst_size, num_long - i) for i in range(0, num_long, burst_size)]
    gaps = len(bursts) + 1
    short_runs = [num_short // gaps + (1 if i < num_short % gaps else 0) for i in range(gaps)]
    # Put the larger short runs between bursts rather than at the ends.
    short_runs = short_runs[-1:] + short_runs[:-1] if gaps > 1 else short_runs
    order: list[str] = []
    for i, burst in enumerate(bursts):
        order += [SHORT] * short_runs[i] + [LONG] * burst
    order += [SHORT] * short_runs[-1]
    return order


def burst_arrivals(classes: list[str], rate_per_s: float, rng: random.Random) -> list[float]:
    """Poisson arrival times, except that each run of longs arrives at its first one's time."""
    times = poisson_arrivals(len(classes), rate_per_s, rng)
    for i in range(1, len(classes)):
        if classes[i] == LONG and classes[i - 1] == LONG:
            times[i] = times[i - 1]
    return times


def build_mixed(cfg: BenchConfig, factory: PromptFactory) -> list[RequestSpec]:
    """All requests of one phase; lengths/arrivals depend on `cfg.seed` only, text on the
    factory's salt."""
    classes = mixed_classes(cfg.num_requests, cfg.long_fraction, cfg.burst_size)
    arrivals: list[float | None] = [None] * len(classes)
    if cfg.request_rate is not None:
        rng = random.Random(f"{cfg.seed}:mixed:arrivals")
        arrivals = list(burst_arrivals(classes, cfg.request_rate, rng))
    specs = []
    for i, (cls, arrival) in enumerate(zip(classes, arrivals, strict=True)):
        tokens = cfg.long_tokens if cls == LONG else cfg.short_tokens
        specs.append(
            RequestSpec(
                index=i,
                request_class=cls,
                max_tokens=cfg.output_tokens,
                target_prompt_tokens=tokens,
                prompt=factory.unique(f"mixed:{i}", tokens),
                arrival_s=arrival,
            )
        )
    return specs
