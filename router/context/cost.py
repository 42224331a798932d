"""A prompt's tokens split by part into cached and computed (pure).

Called once per request when its prefill reported how many prompt tokens the serving engine
found in its prefix cache. A prefix cache hit is always a prefix of the prompt, so the first
`num_cached` tokens are the cached ones: each part's cached count is its overlap with them.
The counts add up: the parts' tokens sum to the prompt's, their cached tokens to `num_cached`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pdserve.router.context.breaks import CacheBreak
from pdserve.router.context.layout import PARTS, Part, PromptLayout


@dataclass(frozen=True, slots=True)
class PartTokens:
    """One part's prompt tokens: taken from the prefix cache, or computed by prefill."""

    cached: int = 0
    computed: int = 0

    @property
    def total(self) -> int:
        return self.cached + self.computed


@dataclass(frozen=True, slots=True)
class MessageCost:
    """One message's segment (its template tokens included) split the same way."""

    index: int
    role: str
    tokens: PartTokens


@dataclass(frozen=True, slots=True)
class PromptCost:
    """What the prompt cost: per part, per message (empty without a layout), and the cache
    break this request showed (None: no break, or no earlier request to compare with)."""

    num_prompt_tokens: int
    num_cached_tokens: int
    parts: dict[Part, PartTokens]
    """Only parts with tokens, in PARTS order."""
    messages: tuple[MessageCost, ...] = ()
    cache_break: CacheBreak | None = None

    def header_json(self) -> dict[str, Any]:
        """The x-pdserve-prompt-cost header's object (parts and break; no per-message list,
        which grows with the conversation)."""
        parts = {p: {"cached": t.cached, "computed": t.computed} for p, t in self.parts.items()}
        return {
            "parts": parts,
            "cache_break": self.cache_break.as_json() if self.cache_break else None,
        }

    def usage_json(self) -> dict[str, Any]:
        """The `pdserve_prompt_cost` usage field: the header's object plus one entry per
        message (index, role, cached, computed)."""
        body = self.header_json()
        body["messages"] = [
            {"index": m.index, "role": m.role, "cached": m.tokens.cached,
             "computed": m.tokens.computed}
            for m in self.messages
        ]  # fmt: skip
        return body


def _overlap(start: int, end: int, num_cached: int) -> PartTokens:
    cached = max(0, min(end, num_cached) - start)
    return PartTokens(cached=cached, computed=(end - start) - cached)


def _add(a: PartTokens, b: PartTokens) -> PartTokens:
    return PartTokens(a.cached + b.cached, a.computed + b.computed)


def prompt_cost(
    num_prompt_tokens: int,
    num_cached_tokens: int,
    layout: PromptLayout | None,
    cache_break: CacheBreak | None = None,
) -> PromptCost:
    """Split a prompt of `num_prompt_tokens` whose first `num_cached_tokens` came from the
    serving engine's prefix cache. Without a layout (or when it is not this prompt's) the
    whole prompt is one `prompt` part."""
    cached = max(0, min(num_cached_tokens, num_prompt_tokens))
    if layout is None or layout.num_tokens != num_prompt_tokens:
        parts: dict[Part, PartTokens] = {}
        if num_prompt_tokens:
            parts["prompt"] = _overlap(0, num_prompt_tokens, cached)
        return PromptCost(num_prompt_tokens, cached, parts, (), cache_break)
    sums: dict[Part, PartTokens] = {}
    messages = []
    for m in layout.messages:
        head = _overlap(m.start, m.content_start, cached)
        body = _overlap(m.content_start, m.end, cached)
        sums["template"] = _add(sums.get("template", PartTokens()), head)
        sums[m.part] = _add(sums.get(m.part, PartTokens()), body)
        messages.append(MessageCost(m.index, m.role, _add(head, body)))
    tail = _overlap(layout.content_end, num_prompt_tokens, cached)
    sums["template"] = _add(sums.get("template", PartTokens()), tail)
    parts = {p: sums[p] for p in PARTS if p in sums and sums[p].total > 0}
    return PromptCost(num_prompt_tokens, cached, parts, tuple(messages), cache_break)
