"""Bootstrap intervals of a run's percentiles (pure): they cover the true percentile as often
as their confidence says, resample whole requests, and read the report's kept requests."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pdserve.bench.intervals import bootstrap_interval, measured_interval, percentile_interval
from tests.unit.bench.report_records import policy_report as _report
from tests.unit.bench.report_records import record as _record


def test_the_median_s_interval_is_the_order_statistics_one() -> None:
    """For n values the median's 95 % interval spans about n/2 +- 1.96 sqrt(n)/2 ranks."""
    n = 1000
    values = [[float(v)] for v in range(1, n + 1)]
    low, high = percentile_interval(values, 50) or (0.0, 0.0)
    half_width = 1.96 * math.sqrt(n) / 2
    assert low == pytest.approx(n / 2 - half_width, abs=8)
    assert high == pytest.approx(n / 2 + half_width, abs=8)


@pytest.mark.parametrize("q", [50, 99])
def test_an_interval_covers_the_true_percentile_at_least_95_times_in_100(q: int) -> None:
    """300 log-normal TTFTs per run, as in the recorded runs: the true percentile lies inside
    the run's interval in at least 95 % of runs (the order statistics' interval is exact up to
    its discreteness; a percentile bootstrap of a p99 covered only 84 % here)."""
    rng = np.random.default_rng(1)
    sigma = 0.8
    true = math.exp(NORMAL_QUANTILE[q] * sigma)
    trials = 400
    covered = 0
    for _ in range(trials):
        sample = rng.lognormal(0.0, sigma, size=300)
        interval = percentile_interval([[v] for v in sample], q)
        assert interval is not None
        covered += interval[0] <= true <= interval[1]
    assert covered >= 0.94 * trials


NORMAL_QUANTILE = {50: 0.0, 99: 2.3263}


def test_streams_resampled_whole_cover_the_true_itl_percentile() -> None:
    """200 streams of 6 gaps each, every stream at its own speed (a log-normal factor on
    log-normal gaps, so a stream's gaps move together): the bootstrap over streams covers the
    true p50 and p99 of the gaps in about 95 % of runs."""
    rng = np.random.default_rng(2)
    population = rng.lognormal(0, 0.3, size=(200_000, 1)) * rng.lognormal(0, 0.2, (200_000, 6))
    truth = {q: float(np.percentile(population, q)) for q in (50, 99)}
    trials = 150
    covered = dict.fromkeys(truth, 0)
    for seed in range(trials):
        streams = population[rng.integers(0, len(population), size=200)]
        for q, true in truth.items():
            low, high = percentile_interval(streams.tolist(), q, resamples=300, seed=seed) or (0, 0)
            covered[q] += low <= true <= high
    assert all(c >= 0.88 * trials for c in covered.values()), covered


def test_requests_are_resampled_whole() -> None:
    """One slow stream of five 100 ms gaps among 99 fast ones: how many copies of that
    request a resample holds decides its p99, so the interval spans both."""
    gaps = [[0.001] * 5 for _ in range(99)] + [[0.1] * 5]
    low, high = percentile_interval(gaps, 99) or (0.0, 0.0)
    assert low == pytest.approx(0.001) and high == pytest.approx(0.1)


def test_no_values_no_interval_and_bad_arguments_are_refused() -> None:
    assert percentile_interval([], 99) is None
    assert percentile_interval([[], []], 50) is None
    with pytest.raises(ValueError, match="0 <= q <= 100"):
        percentile_interval([[1.0]], 101)
    with pytest.raises(ValueError, match="confidence"):
        percentile_interval([[1.0]], 50, confidence=1.0)


def test_the_report_s_interval_takes_the_class_s_successful_requests() -> None:
    records = [_record("short", 0.01 * (i + 1)) for i in range(100)]
    records += [_record("long", 10.0), _record("short", 99.0, error="boom")]
    report = _report(records)
    low, high = measured_interval(report, "short", "ttft_p50_s") or (0.0, 0.0)
    assert 0.35 < low < 0.505 < high < 0.65  # the long one and the failed one left out
    everything = measured_interval(report, None, "ttft_p99_s")
    assert everything is not None and everything[1] == pytest.approx(10.0)
    assert measured_interval(report, "short", "itl_p99_s") == pytest.approx((0.05, 0.05))
    # (E2E 1.0 - TTFT) / 10 tokens
    tpot = measured_interval(report, "short", "tpot_p50_s")
    assert tpot is not None and tpot[0] < (1.0 - 0.505) / 10 < tpot[1]
    assert measured_interval(report, "short", "requests_per_s") is None
    assert measured_interval(_report(None), "short", "ttft_p50_s") is None


@pytest.mark.parametrize("q", [0, 37, 50, 99, 100])
def test_a_resample_s_percentile_is_numpy_s_over_its_pooled_values(q: int) -> None:
    """With one resample, the interval is that resample's percentile: numpy.percentile of
    the values of the requests it drew, whatever their number of values."""
    rng = np.random.default_rng(5)
    streams = [list(rng.random(int(n))) for n in rng.integers(1, 9, size=40)]
    low, high = bootstrap_interval(streams, q, resamples=1, seed=3)
    picks = np.random.default_rng(3).integers(0, len(streams), size=(1, len(streams)))[0]
    expected = float(np.percentile(np.concatenate([streams[i] for i in picks]), q))
    assert low == pytest.approx(expected) and high == pytest.approx(expected)
