"""The host's speed as the simulator sees it (pure): how it wanders from one 50 ms window of
the clock to the next (`SimProfile.step_speed_sigma`), one draw per window shared by every
engine; and each pooled simulated run's whole speed (`SimProfile.round_speed_sigma`,
`run_speed_factors`), which `predict` hands each `Simulation` as its `speed_factor`."""

from __future__ import annotations

import math
import random
from statistics import NormalDist

STEP_SPEED_PERIOD_S = 0.05
"""How long the host's speed factor (`SimProfile.step_speed_sigma`) holds before the next draw:
about one short stream's decode, the scale at which other processes hold a core."""


class WindowSpeed:
    """One log-normal factor (median 1, `sigma`) per STEP_SPEED_PERIOD_S window of the clock,
    drawn from `rng` when a window is first asked for; always 1 with sigma 0."""

    def __init__(self, sigma: float, rng: random.Random):
        self._sigma = sigma
        self._rng = rng
        self._window = -1
        self._factor = 1.0

    def factor(self, now_s: float) -> float:
        """The host's speed factor for a step starting at `now_s` (times ask in order)."""
        if self._sigma <= 0:
            return 1.0
        window = math.floor(now_s / STEP_SPEED_PERIOD_S)
        if window != self._window:
            self._window = window
            self._factor = math.exp(self._rng.gauss(0.0, self._sigma))
        return self._factor


def run_speed_factors(sigma: float, runs: int) -> list[float]:
    """The host speed of each of `runs` pooled simulated runs: a log-normal of median 1 and
    `sigma` at evenly spaced quantiles ((i + 0.5) / runs), so the pool spans the spread
    without drawing it and the same profile always predicts the same. One run, or sigma 0:
    [1.0] * runs (the profile's own speed)."""
    if sigma < 0 or runs < 1:
        raise ValueError(f"need sigma >= 0 and runs >= 1, got {sigma}, {runs}")
    normal = NormalDist()
    return [math.exp(sigma * normal.inv_cdf((i + 0.5) / runs)) for i in range(runs)]
