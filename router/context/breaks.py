"""Cache-break detection: where a conversation's prompt stopped repeating the previous one.

`ConversationTracker` is built once per router replica and called once per chat or
completion request that belongs to a conversation (a caller-supplied key, or the prompt's
opening; router/prepare.py decides), from the request's preparation (the event loop, or the
tokenizer thread for big bodies). It remembers each conversation's latest prompt tokens in a
least-recently-used store bounded in bytes; the lock covers only the store's lookups and
inserts, never the comparison.

A break is the first token where this prompt departs from the previous prompt of the same
conversation, before the previous prompt's trailing template tokens (its end-of-turn and
generation prompt, which an appended assistant turn replaces by design). A prompt that
repeats the previous one and adds to it, or repeats a shorter piece of it (a retry), is not a
break.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from pdserve.router.context.layout import Part, PromptLayout

ENTRY_OVERHEAD_BYTES = 200
"""What one remembered conversation costs besides its tokens (key, entry, LRU links)."""
BYTES_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class CacheBreak:
    """This prompt departed from its conversation's previous prompt at `token_index`."""

    token_index: int
    """The first token that differs (or the first one the previous prompt did not have)."""
    message_index: int | None
    """The message whose segment holds that token; None when it is in the template tokens
    after the last message, or the prompt has no message layout."""
    role: str | None
    part: Part
    """The `pdserve_cache_breaks_total` label: the message's part (`template` after the last
    message, `prompt` without a layout)."""
    lost_tokens: int
    """Prompt tokens the prefix cache could have served had this prompt kept repeating the
    previous one: the whole KV blocks of the length both share, from the break's block on
    (engines cache full blocks only, so a break in the last partial block costs 0)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "token_index": self.token_index,
            "message_index": self.message_index,
            "role": self.role,
            "part": self.part,
            "lost_tokens": self.lost_tokens,
        }


@dataclass(frozen=True, slots=True)
class _Remembered:
    tokens: bytes
    """The previous prompt's token ids (int32, native order)."""
    stable_tokens: int
    """Where its trailing template tokens began (the whole prompt without a layout)."""


def conversation_key(kind: str, value: str | bytes, caller: str = "") -> bytes:
    """A fixed-size key (16 bytes) for a conversation, whatever the client sent. `caller`
    (the request's credentials, e.g. its Authorization header) scopes it: a break reveals
    where a prompt departs from the conversation's previous one, so one API key must never
    be compared with another key's prompts."""
    raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    h = hashlib.blake2b(digest_size=16)
    for piece in (kind.encode(), caller.encode("utf-8", "surrogatepass"), raw):
        h.update(len(piece).to_bytes(8, "little"))
        h.update(piece)
    return h.digest()


def common_prefix_tokens(a: bytes, b: bytes) -> int:
    """How many leading int32 tokens the two token byte strings share (binary search over
    slice comparisons: C-speed memcmp, no Python loop over tokens)."""
    n = min(len(a), len(b)) // BYTES_PER_TOKEN
    lo, hi = 0, n  # the first lo tokens match; the first hi+1 do not (unless hi == n)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[: mid * BYTES_PER_TOKEN] == b[: mid * BYTES_PER_TOKEN]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def find_break(
    previous: bytes,
    previous_stable_tokens: int,
    ids: bytes,
    layout: PromptLayout | None,
    block_size_tokens: int = 1,
) -> CacheBreak | None:
    """The break of prompt `ids` against the conversation's `previous` prompt, or None.
    `block_size_tokens`: the engines' KV block size (what `lost_tokens` counts in)."""
    common = common_prefix_tokens(previous, ids)
    num_prev, num_now = len(previous) // BYTES_PER_TOKEN, len(ids) // BYTES_PER_TOKEN
    if common >= min(previous_stable_tokens, num_now):
        return None
    span = layout.message_at(common) if layout is not None else None
    part: Part = span.part if span is not None else ("template" if layout else "prompt")
    return CacheBreak(
        token_index=common,
        message_index=span.index if span is not None else None,
        role=span.role if span is not None else None,
        part=part,
        lost_tokens=max(0, _whole_blocks(min(num_prev, num_now), block_size_tokens)
                        - _whole_blocks(common, block_size_tokens)),
    )  # fmt: skip


def _whole_blocks(num_tokens: int, block_size_tokens: int) -> int:
    return num_tokens // block_size_tokens * block_size_tokens


class ConversationTracker:
    """Remembers each conversation's latest prompt (LRU, at most `max_bytes` in all).
    `block_size_tokens`: the engines' KV block size (breaks count their cost in it)."""

    def __init__(self, max_bytes: int, block_size_tokens: int = 1):
        if block_size_tokens < 1:
            raise ValueError(f"block_size_tokens must be >= 1, got {block_size_tokens}")
        self._block_size_tokens = block_size_tokens
        self._store: LRUCache[bytes, _Remembered] = LRUCache(
            maxsize=max_bytes, getsizeof=_size_bytes
        )
        self._lock = threading.Lock()

    @property
    def num_conversations(self) -> int:
        return len(self._store)

    @property
    def stored_bytes(self) -> int:
        """What the remembered conversations hold, as the bound counts it."""
        return int(self._store.currsize)

    @property
    def max_bytes(self) -> int:
        return int(self._store.maxsize)

    def observe(
        self, key: bytes, ids: Sequence[int] | bytes, layout: PromptLayout | None
    ) -> CacheBreak | None:
        """Compare prompt `ids` (token ids, or already int32 bytes as `array("i", ids)`
        makes them) with the conversation's previous prompt (the break, or None: none, or
        the conversation is new or was forgotten), then remember it as the latest. A prompt
        too big for the whole store is compared but not remembered."""
        tokens = ids if isinstance(ids, bytes) else array("i", ids).tobytes()
        with self._lock:
            previous = self._store.get(key)
        found = None
        if previous is not None:
            found = find_break(
                previous.tokens, previous.stable_tokens, tokens, layout, self._block_size_tokens
            )
        stable = layout.content_end if layout is not None else len(tokens) // BYTES_PER_TOKEN
        entry = _Remembered(tokens, stable)
        with self._lock:
            if _size_bytes(entry) <= self._store.maxsize:
                self._store[key] = entry
            else:
                self._store.pop(key, None)
        return found


def _size_bytes(entry: _Remembered) -> int:
    return len(entry.tokens) + ENTRY_OVERHEAD_BYTES
