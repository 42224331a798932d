"""Percentiles, summaries, ratios and number formatting (pure)."""

from __future__ import annotations

import pytest

from pdserve.bench.stats import percentile, rate, ratio, sig3, summarize


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1.0], 50, 1.0),
        ([1.0], 99, 1.0),
        ([1.0, 2.0], 50, 1.5),
        ([3.0, 1.0, 2.0], 50, 2.0),  # order does not matter
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([1.0, 2.0, 3.0, 4.0], 90, 3.7),  # numpy "linear"
        (list(range(1, 101)), 99, 99.01),
        ([], 50, None),
    ],
)
def test_percentile(values: list[float], q: float, expected: float | None) -> None:
    got = percentile(values, q)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_percentile_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)


def test_summarize() -> None:
    s = summarize([0.1, 0.2, 0.3, 0.4])
    assert s.count == 4
    assert s.mean == pytest.approx(0.25)
    assert s.p50 == pytest.approx(0.25)
    assert summarize([]).p99 is None and summarize([]).mean is None


@pytest.mark.parametrize(
    ("new", "base", "expected"),
    [(1.0, 2.0, 0.5), (3.0, 1.5, 2.0), (1.0, 0.0, None), (None, 1.0, None), (1.0, None, None)],
)
def test_ratio(new: float | None, base: float | None, expected: float | None) -> None:
    assert ratio(new, base) == expected


def test_rate() -> None:
    assert rate(10, 2.0) == 5.0
    assert rate(10, 0.0) is None


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        (0.123456, "0.123"),
        (1.23456, "1.23"),
        (12.345, "12.3"),
        (0.000123456, "0.000123"),
        (123.4, "123"),
        (12345.6, "12,346"),
        (1.0, "1.00"),
        (0.12, "0.120"),
        (0.0, "0.00"),
    ],
)
def test_sig3(value: float | None, text: str) -> None:
    assert sig3(value) == text
