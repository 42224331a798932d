"""Prompts of a given token count without a tokenizer (pure, deterministic).

Text prompts are seeded words; their length is calibrated from the server's own
`usage.prompt_tokens` (a straight line: tokens = overhead + tokens_per_word x words, fitted on
the two `calibration_prompts` by the runner). Token-id prompts (`--token-ids`, completions only)
are exact. Everything is deterministic in (salt, key): phases that must not share a prefix
cache use different salts and get different prompts of the same lengths.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from pdserve.bench.words import WORDS

TOKEN_ID_LOW = 10
TOKEN_ID_HIGH = 1000  # below every real vocabulary size (the demo model has 2,048 ids)
TAG_TOKEN_IDS = 4


@dataclass(frozen=True)
class Calibration:
    """prompt tokens ≈ overhead_tokens + tokens_per_word x words (for one endpoint)."""

    tokens_per_word: float
    overhead_tokens: float

    def words_for(self, num_tokens: float, *, with_overhead: bool = True) -> int:
        """Words needed for `num_tokens` tokens (at least 1)."""
        budget = num_tokens - (self.overhead_tokens if with_overhead else 0.0)
        return max(1, round(budget / self.tokens_per_word))


def fit_calibration(points: Sequence[tuple[int, int]]) -> Calibration:
    """Least-squares line through (words, prompt tokens) points; at least two word counts."""
    if len({w for w, _ in points}) < 2:
        raise ValueError("calibration needs prompts of at least two different word counts")
    n = len(points)
    mean_w = sum(w for w, _ in points) / n
    mean_t = sum(t for _, t in points) / n
    var = sum((w - mean_w) ** 2 for w, _ in points)
    slope = sum((w - mean_w) * (t - mean_t) for w, t in points) / var
    if slope <= 0:
        raise ValueError(
            f"calibration found {slope:.3f} tokens per word; the server's "
            "usage.prompt_tokens does not grow with the prompt"
        )
    return Calibration(tokens_per_word=slope, overhead_tokens=max(0.0, mean_t - slope * mean_w))


Prompt = str | tuple[int, ...]


def calibration_prompts(tag: str, repeats: tuple[int, ...] = (1, 2)) -> list[tuple[int, str]]:
    """(words, text) probes: the tag, then the whole word list `r` times, for each r.

    Prompts draw words uniformly from `WORDS`, so the tokens the whole list takes per word
    is exactly the expected tokens per word; two repeat counts give slope and overhead
    without sampling noise."""
    return [(len(WORDS) * r, f"{tag} " + " ".join(WORDS * r)) for r in repeats]


@dataclass(frozen=True)
class PromptFactory:
    """Builds prompt text (or token ids) for a phase.

    Content is seeded by `key` only, so every phase sends the same lengths; every prompt
    starts with a tag seeded by `salt` as well, so phases share no prefix-cache block (a
    cache block covers the tag, and every later block's hash chains through it)."""

    calibration: Calibration
    salt: str
    token_ids: bool = False

    def tag(self, key: str) -> str:
        """A short tag unique to (salt, key) for the start of a prompt."""
        return hashlib.sha256(f"{self.salt}:{key}".encode()).hexdigest()[:8]

    def tag_ids(self, key: str) -> list[int]:
        rng = random.Random(f"{self.salt}:tag-ids:{key}")
        return [rng.randrange(TOKEN_ID_LOW, TOKEN_ID_HIGH) for _ in range(TAG_TOKEN_IDS)]

    def words(self, key: str, num_words: int) -> list[str]:
        rng = random.Random(f"words:{key}")
        return [rng.choice(WORDS) for _ in range(num_words)]

    def ids(self, key: str, num_ids: int) -> list[int]:
        rng = random.Random(f"ids:{key}")
        return [rng.randrange(TOKEN_ID_LOW, TOKEN_ID_HIGH) for _ in range(num_ids)]

    def text(self, key: str, num_tokens: float, *, with_overhead: bool = False) -> str:
        """Seeded words worth about `num_tokens` tokens, no tag (for chat message parts)."""
        n = self.calibration.words_for(num_tokens, with_overhead=with_overhead)
        return " ".join(self.words(key, n))

    def unique(self, key: str, num_tokens: int) -> Prompt:
        """A whole prompt of about `num_tokens` tokens that starts with a unique tag."""
        if self.token_ids:
            body = self.ids(key, max(0, num_tokens - TAG_TOKEN_IDS))
            return tuple((self.tag_ids(key) + body)[: max(1, num_tokens)])
        n = self.calibration.words_for(num_tokens)
        return f"{self.tag(key)} " + " ".join(self.words(key, n))

    def from_blocks(
        self, key: str, hash_ids: Sequence[int], block_tokens: int, num_tokens: int
    ) -> Prompt:
        """A prompt of about `num_tokens` tokens: the phase's tag, then one fixed block per
        hash id (so equal hash-id prefixes give equal prompt prefixes within a phase), cut to
        length; padded with words unique to `key` when the blocks are too short."""
        if self.token_ids:
            out = self.tag_ids("phase")
            for h in hash_ids:
                if len(out) >= num_tokens:
                    break
                out += self.ids(f"block:{h}", block_tokens)
            if len(out) < num_tokens:
                out += self.ids(f"pad:{key}", num_tokens - len(out))
            return tuple(out[: max(1, num_tokens)])
        per_block = self.calibration.words_for(block_tokens, with_overhead=False)
        total = self.calibration.words_for(num_tokens)
        words: list[str] = []
        for h in hash_ids:
            if len(words) >= total:
                break
            words += self.words(f"block:{h}", per_block)
        if len(words) < total:
            words += self.words(f"pad:{key}", total - len(words))
        return f"{self.tag('phase')} " + " ".join(words[:total])
