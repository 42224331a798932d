"""Length distributions and Poisson arrivals with a seeded RNG (pure)."""

from __future__ import annotations

import random

import pytest

from pdserve.bench.distributions import Distribution, parse_distribution, poisson_arrivals


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("fixed:32", Distribution("fixed", 32)),
        ("uniform:100:2000", Distribution("uniform", 100, 2000)),
        ("normal:500:50", Distribution("normal", 500, 50)),
        (" fixed:7 ", Distribution("fixed", 7)),
    ],
)
def test_parse(text: str, expected: Distribution) -> None:
    assert parse_distribution(text) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("zipf:1", "unknown distribution"),
        ("uniform:100", "takes 2"),
        ("fixed:1:2", "takes 1"),
        ("fixed:abc", "not a number"),
        ("fixed:0", ">= 1"),
        ("uniform:200:100", "LO <= HI"),
        ("normal:100:-1", "STD >= 0"),
    ],
)
def test_parse_rejects(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_distribution(text)


@pytest.mark.parametrize(
    ("text", "lo", "hi", "mean"),
    [
        ("fixed:32", 32, 32, 32),
        ("uniform:100:2000", 100, 2000, 1050),
        ("normal:500:50", 1, 10_000, 500),
    ],
)
def test_samples_are_seeded_bounded_and_centred(text: str, lo: int, hi: int, mean: int) -> None:
    dist = parse_distribution(text)
    a = [dist.sample(random.Random(3)) for _ in range(3)]
    rng = random.Random(42)
    values = [dist.sample(rng) for _ in range(4000)]
    assert a == [dist.sample(random.Random(3)) for _ in range(3)]
    assert all(lo <= v <= hi for v in values)
    assert sum(values) / len(values) == pytest.approx(mean, rel=0.05)


def test_normal_is_clamped_to_one() -> None:
    dist = parse_distribution("normal:1:100")
    rng = random.Random(0)
    assert min(dist.sample(rng) for _ in range(1000)) == 1


def test_poisson_arrivals() -> None:
    times = poisson_arrivals(5000, 4.0, random.Random(1))
    assert times[0] == 0.0
    assert times == sorted(times)
    assert (times[-1] - times[0]) / (len(times) - 1) == pytest.approx(0.25, rel=0.05)
    assert times == poisson_arrivals(5000, 4.0, random.Random(1))
    with pytest.raises(ValueError, match="> 0"):
        poisson_arrivals(3, 0.0, random.Random(1))
