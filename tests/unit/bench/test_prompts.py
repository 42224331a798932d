"""Prompt construction without a tokenizer: calibration, uniqueness, shared blocks (pure)."""

from __future__ import annotations

import pytest

from pdserve.bench.prompts import (
    TOKEN_ID_HIGH,
    TOKEN_ID_LOW,
    Calibration,
    PromptFactory,
    fit_calibration,
)


@pytest.mark.parametrize(
    ("points", "per_word", "overhead"),
    [
        ([(64, 83), (320, 403)], 1.25, 3.0),
        ([(10, 21), (20, 41), (30, 61)], 2.0, 1.0),
        ([(100, 100), (200, 200)], 1.0, 0.0),
    ],
)
def test_fit_calibration(points: list[tuple[int, int]], per_word: float, overhead: float) -> None:
    cal = fit_calibration(points)
    assert cal.tokens_per_word == pytest.approx(per_word)
    assert cal.overhead_tokens == pytest.approx(overhead)


@pytest.mark.parametrize(
    ("points", "match"),
    [([(64, 80), (64, 90)], "two different"), ([(10, 50), (20, 40)], "does not grow")],
)
def test_fit_calibration_rejects(points: list[tuple[int, int]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fit_calibration(points)


@pytest.mark.parametrize(("tokens", "words"), [(53, 40), (1503, 1200), (1, 1), (3, 1)])
def test_words_for(tokens: int, words: int) -> None:
    assert Calibration(1.25, 3.0).words_for(tokens) == words


def test_unique_prompt_starts_with_tag_and_has_the_calibrated_length(
    factory: PromptFactory,
) -> None:
    prompt = factory.unique("mixed:0", 53)
    assert isinstance(prompt, str)
    tag, *words = prompt.split()
    assert tag == factory.tag("mixed:0") and len(tag) == 8
    assert len(words) == 40


def test_unique_prompts_differ_by_key_and_salt_but_are_deterministic(
    factory: PromptFactory,
) -> None:
    other_salt = PromptFactory(factory.calibration, salt="s1")
    a, b = factory.unique("k:0", 100), factory.unique("k:1", 100)
    assert a != b
    assert factory.unique("k:0", 100) == a
    assert other_salt.unique("k:0", 100) != a
    assert str(a).split()[0] != str(other_salt.unique("k:0", 100)).split()[0]


@pytest.mark.parametrize("tokens", [1, 4, 5, 1500])
def test_token_id_prompts_are_exact(tokens: int) -> None:
    f = PromptFactory(Calibration(1.0, 0.0), salt="s", token_ids=True)
    ids = f.unique("x", tokens)
    assert isinstance(ids, tuple) and len(ids) == tokens
    assert all(TOKEN_ID_LOW <= i < TOKEN_ID_HIGH for i in ids)
    assert f.unique("y", tokens) != ids


def _tag_and_words(prompt: object) -> tuple[str, list[str]]:
    tag, *words = str(prompt).split()
    return tag, words


def test_blocks_share_prefixes_exactly_as_hash_ids_do(factory: PromptFactory) -> None:
    # 100-token blocks = 80 words each; 250 tokens = 198 words after the 3-token overhead.
    tag_a, a = _tag_and_words(factory.from_blocks("a", [1, 2, 3], 100, 250))
    tag_b, b = _tag_and_words(factory.from_blocks("b", [1, 2, 9], 100, 250))
    tag_c, c = _tag_and_words(factory.from_blocks("c", [7, 2, 3], 100, 250))
    assert len(a) == len(b) == len(c) == 198
    assert tag_a == tag_b == tag_c == factory.tag("phase")  # one tag for the whole phase
    assert a[:160] == b[:160] and a[160:] != b[160:]
    assert a[:80] != c[:80]  # a different first block: no shared prefix at all


def test_blocks_pad_when_the_trace_lists_too_few_blocks(factory: PromptFactory) -> None:
    _, words = _tag_and_words(factory.from_blocks("a", [1], 100, 250))
    assert len(words) == 198
    assert words[:80] == _tag_and_words(factory.from_blocks("b", [1], 100, 250))[1][:80]


def test_phases_share_lengths_but_no_prefix(factory: PromptFactory) -> None:
    other = PromptFactory(factory.calibration, salt="s1")
    for make in (
        lambda f: f.unique("mixed:3", 300),
        lambda f: f.from_blocks("trace:3", [4, 5], 100, 250),
    ):
        (tag_a, a), (tag_b, b) = _tag_and_words(make(factory)), _tag_and_words(make(other))
        assert a == b and tag_a != tag_b  # same body, different first tokens


def test_token_id_blocks_share_prefixes() -> None:
    f = PromptFactory(Calibration(1.0, 0.0), salt="s", token_ids=True)
    a = f.from_blocks("a", [1, 2], 64, 100)
    b = f.from_blocks("b", [1, 3], 64, 100)
    assert len(a) == len(b) == 100
    assert a[:68] == b[:68] and a[68:] != b[68:]  # 4 tag ids, then a 64-id block
    other = PromptFactory(f.calibration, salt="t", token_ids=True).from_blocks("a", [1, 2], 64, 100)
    assert other[:4] != a[:4] and other[4:] == a[4:]
