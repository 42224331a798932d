"""Where each chat message sits in the rendered prompt's tokens (pure).

`layout_from_render` is called once per chat request by the prompt renderer
(router/prompts.py), with the text the chat template rendered, each token's character
offsets in it, and the same text rendered with a unique marker in place of every message's
content (the template's skeleton). The skeleton tells exactly which characters the template
wrote and which came from a message, for any template, without guessing: the real text must
be the skeleton's template pieces with each message's content (as sent, or trimmed) between
them. When it is not (a template that rewrites content), there is no layout (None) and the
prompt is accounted as one `prompt` part.

Every prompt token belongs to exactly one segment: message i's segment runs from the token
after message i-1's content to its own content's last token (the template tokens before its
content, e.g. the role header, are its `template` tokens); the tokens after the last
message's content (end-of-turn, the generation prompt) are the trailing template segment.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

Part = Literal["system", "user", "assistant", "tool", "template", "prompt"]
"""A prompt part: a message role's content, the chat template's own tokens, or `prompt` (a
completion prompt, or a chat prompt whose layout is unknown). A bounded metric label."""
PARTS: tuple[Part, ...] = get_args(Part)
_ROLE_PARTS: dict[str, Part] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def part_of_role(role: str) -> Part:
    """The part a message role's content counts as (`developer` counts as `system`)."""
    return _ROLE_PARTS.get(role, "prompt")


@dataclass(frozen=True, slots=True)
class MessageSpan:
    """One message's tokens: [start, content_start) were written by the template,
    [content_start, end) hold the message's content."""

    index: int
    """The message's index in the request's `messages`."""
    role: str
    start: int
    content_start: int
    end: int

    @property
    def part(self) -> Part:
        return part_of_role(self.role)

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class PromptLayout:
    """The token segments of one rendered chat prompt, in order and contiguous: the first
    message's segment starts at token 0, each next one where the previous ended, and the
    trailing template tokens run from the last message's `end` to `num_tokens`."""

    num_tokens: int
    messages: tuple[MessageSpan, ...]

    @property
    def content_end(self) -> int:
        """Where the trailing template tokens (end of turn, generation prompt) begin."""
        return self.messages[-1].end if self.messages else 0

    def message_at(self, token: int) -> MessageSpan | None:
        """The message whose segment holds token index `token`; None in the trailing
        template tokens (or past the prompt)."""
        if token >= self.content_end or token < 0:
            return None
        ends = [m.end for m in self.messages]
        return self.messages[bisect_right(ends, token)]


class LayoutMismatch(ValueError):
    """The rendered text is not the skeleton's template pieces around the messages' contents
    (the template transforms content in a way the layout cannot follow)."""


def skeleton_marker(index: int) -> str:
    """The stand-in for message `index`'s content when rendering the skeleton (private-use
    characters no template trims or escapes, and no client text is likely to hold)."""
    return f"\ue000{index}\ue001"


def layout_from_render(
    text: str,
    token_offsets: Sequence[tuple[int, int]],
    skeleton: str,
    roles: Sequence[str],
    contents: Sequence[str],
) -> PromptLayout:
    """The layout of a prompt whose rendered `text` tokenized into tokens with these
    character `token_offsets`; `skeleton` is the same chat rendered with
    `skeleton_marker(i)` as message i's content. Raises LayoutMismatch when `text` cannot be
    matched against the skeleton."""
    if len(roles) != len(contents):
        raise ValueError("roles and contents must have the same length")
    pieces = _template_pieces(skeleton, len(contents))
    char_spans = _content_char_spans(text, pieces, contents)
    starts = [a for a, _ in token_offsets]
    spans = []
    prev_end = 0
    for i, (role, (c0, c1)) in enumerate(zip(roles, char_spans, strict=True)):
        content_start = max(prev_end, bisect_left(starts, c0))
        end = max(content_start, bisect_left(starts, c1))
        spans.append(MessageSpan(i, role, prev_end, content_start, end))
        prev_end = end
    return PromptLayout(num_tokens=len(token_offsets), messages=tuple(spans))


def _template_pieces(skeleton: str, num_messages: int) -> list[str]:
    """The template text before, between and after the markers (num_messages + 1 pieces)."""
    pieces = []
    pos = 0
    for i in range(num_messages):
        marker = skeleton_marker(i)
        at = skeleton.find(marker, pos)
        if at < 0 or skeleton.find(marker, at + len(marker)) >= 0:
            raise LayoutMismatch(f"message {i}'s content is not rendered exactly once")
        pieces.append(skeleton[pos:at])
        pos = at + len(marker)
    pieces.append(skeleton[pos:])
    return pieces


def _content_char_spans(
    text: str, pieces: Sequence[str], contents: Sequence[str]
) -> list[tuple[int, int]]:
    """Each content's [start, end) characters in `text` (as sent, or as the template trimmed
    it); raises LayoutMismatch unless text == pieces[0] + c0 + pieces[1] + ... + pieces[-1]."""
    spans = []
    pos = 0
    for i, content in enumerate(contents):
        if not text.startswith(pieces[i], pos):
            raise LayoutMismatch(f"the template text before message {i} differs")
        pos += len(pieces[i])
        for rendered in (content, content.strip()):
            end = pos + len(rendered)
            if text.startswith(rendered, pos) and text.startswith(pieces[i + 1], end):
                break
        else:
            raise LayoutMismatch(f"message {i}'s content is rendered changed")
        spans.append((pos, end))
        pos = end
    if text[pos:] != pieces[-1]:
        raise LayoutMismatch("the template text after the last message differs")
    return spans
