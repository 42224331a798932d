"""The jitter fit: the simulation draws each hop of a measured two-hop stage on its own, so
the fitted sigma must make the *sum* of two draws spread like the measured stage."""

from __future__ import annotations

import math
import random

import pytest

from pdserve.sim.fit import _lognormal_sigma


@pytest.mark.parametrize("ratio", [1.5, 2.0, 4.0, 5.6, 9.0])
def test_two_hop_sum_reproduces_the_measured_spread(ratio: float) -> None:
    sigma = _lognormal_sigma(0.010, 0.010 * ratio, num_terms=2)
    rng = random.Random(7)
    n = 100_000
    sums = sorted(math.exp(rng.gauss(0, sigma)) + math.exp(rng.gauss(0, sigma)) for _ in range(n))
    simulated = sums[int(0.99 * n)] / sums[n // 2]
    assert simulated == pytest.approx(ratio, rel=0.08)
    # Fitting the sum's spread to one term would have narrowed the tail.
    one = _lognormal_sigma(0.010, 0.010 * ratio)
    assert one < sigma


def test_no_spread_without_a_tail() -> None:
    assert _lognormal_sigma(0.010, 0.010, num_terms=2) == 0.0
    assert _lognormal_sigma(0.010, None, num_terms=2) == 0.0
