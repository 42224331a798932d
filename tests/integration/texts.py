"""Deterministic prompt texts for the integration tests."""

from __future__ import annotations

WORDS = [
    "river",
    "stone",
    "garden",
    "light",
    "window",
    "paper",
    "market",
    "silver",
    "forest",
    "engine",
    "quiet",
    "harbor",
    "winter",
    "orange",
    "signal",
    "bridge",
    "valley",
    "candle",
    "mirror",
    "rocket",
]


def text_of_words(num_words: int, salt: int = 0) -> str:
    """A varied sentence-like text; different salts give different (uncached) prefixes."""
    out = []
    for i in range(num_words):
        word = WORDS[(i * 7 + salt * 3) % len(WORDS)]
        out.append(word if i % 9 else f"{word}{salt}.")
    return " ".join(out)
