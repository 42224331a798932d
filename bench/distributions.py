"""Length distributions (`fixed:N`, `uniform:LO:HI`, `normal:MEAN:STD`) and Poisson arrivals.

Pure: every sampler takes the caller's seeded `random.Random`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

DistKind = Literal["fixed", "uniform", "normal"]


@dataclass(frozen=True)
class Distribution:
    """A distribution of positive integer lengths. `a`/`b`: N/unused, LO/HI, MEAN/STD."""

    kind: DistKind
    a: float
    b: float = 0.0

    def sample(self, rng: random.Random) -> int:
        """One length, at least 1 (normal samples are rounded and clamped)."""
        if self.kind == "fixed":
            value = self.a
        elif self.kind == "uniform":
            value = rng.randint(int(self.a), int(self.b))
        else:
            value = rng.gauss(self.a, self.b)
        return max(1, round(value))

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{self.a:g}"
        return f"{self.kind}:{self.a:g}:{self.b:g}"


def parse_distribution(text: str) -> Distribution:
    """Parse `fixed:N`, `uniform:LO:HI` or `normal:MEAN:STD`; ValueError says what is wrong."""
    kind, *raw = text.strip().split(":")
    expected = {"fixed": 1, "uniform": 2, "normal": 2}
    if kind not in expected:
        raise ValueError(
            f"unknown distribution {kind!r} in {text!r}; "
            "use fixed:N, uniform:LO:HI or normal:MEAN:STD"
        )
    if len(raw) != expected[kind]:
        raise ValueError(f"{kind} takes {expected[kind]} number(s), got {text!r}")
    try:
        nums = [float(x) for x in raw]
    except ValueError as exc:
        raise ValueError(f"not a number in distribution {text!r}") from exc
    if kind == "fixed" and nums[0] < 1:
        raise ValueError(f"fixed length must be >= 1, got {text!r}")
    if kind == "uniform" and not 1 <= nums[0] <= nums[1]:
        raise ValueError(f"uniform needs 1 <= LO <= HI, got {text!r}")
    if kind == "normal" and (nums[0] < 1 or nums[1] < 0):
        raise ValueError(f"normal needs MEAN >= 1 and STD >= 0, got {text!r}")
    return Distribution(kind=kind, a=nums[0], b=nums[1] if len(nums) > 1 else 0.0)  # type: ignore[arg-type]


def poisson_arrivals(num: int, rate_per_s: float, rng: random.Random) -> list[float]:
    """Arrival offsets (seconds from 0) of a Poisson process: exponential gaps, first at 0."""
    if rate_per_s <= 0:
        raise ValueError(f"request rate must be > 0, got {rate_per_s}")
    times: list[float] = []
    t = 0.0
    for i in range(num):
        if i:
            t += rng.expovariate(rate_per_s)
        times.append(t)
    return times
