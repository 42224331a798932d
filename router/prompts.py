"""Prompt rendering and tokenization with the model's own tokenizer and chat template.

The router tokenizes every request exactly once, here; the token ids travel to the engines
(which then skip their own tokenization) and feed routing decisions. A chat prompt is
rendered to text by the chat template and tokenized without added special tokens (what
`apply_chat_template(tokenize=True)` does), keeping each token's character offsets so the
prompt's layout (which tokens belong to which message; router/context/layout.py) comes from
the same single tokenization.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pdserve.router.context.layout import (
    LayoutMismatch,
    PromptLayout,
    layout_from_render,
    skeleton_marker,
)
from pdserve.router.errors import OpenAIError
from pdserve.router.openai_models import ChatMessage

log = logging.getLogger("pdserve.router")


@dataclass(frozen=True, slots=True)
class RenderedChat:
    """A chat prompt's token ids and, when asked for and known, its layout."""

    token_ids: list[int]
    layout: PromptLayout | None


class PromptRenderer:
    """Wraps a Hugging Face tokenizer. Built once per router replica; thread-compatible."""

    def __init__(self, model_path: str):
        from transformers import AutoTokenizer

        self._tok: Any = AutoTokenizer.from_pretrained(model_path)
        if not getattr(self._tok, "chat_template", None):
            self._tok.chat_template = None
        self.eos_token_id: int | None = self._tok.eos_token_id
        self._has_offsets = getattr(self._tok, "backend_tokenizer", None) is not None
        if not self._has_offsets:
            log.warning(
                "the tokenizer at %s is not a fast tokenizer (no token offsets): prompt cost "
                "is reported as one 'prompt' part, not per message",
                model_path,
            )

    def render_chat(
        self, messages: list[ChatMessage], add_generation_prompt: bool, *, layout: bool = False
    ) -> RenderedChat:
        """Token ids of the chat, rendered by the model's chat template; with `layout`, also
        which tokens belong to which message (None when the template rewrites content in a
        way the layout cannot follow, or the tokenizer has no offsets)."""
        if self._tok.chat_template is None:
            raise OpenAIError(
                400, "this model has no chat template; use /v1/completions", param="messages"
            )
        try:
            texts = [m.text() for m in messages]
        except ValueError as exc:
            raise OpenAIError(400, str(exc), param="messages") from exc
        convo = [
            {"role": m.role, "content": t, **({"name": m.name} if m.name else {})}
            for m, t in zip(messages, texts, strict=True)
        ]
        text = self._render(convo, add_generation_prompt)
        if not (layout and self._has_offsets):
            return RenderedChat(list(self._tok.encode(text, add_special_tokens=False)), None)
        # The Rust tokenizer directly: the same ids as `encode`, with offsets, and no slower
        # (the Python wrapper's offset mapping costs about a third more on long prompts).
        enc = self._tok.backend_tokenizer.encode(text, add_special_tokens=False)
        ids = list(enc.ids)
        try:
            skeleton_convo = [{**c, "content": skeleton_marker(i)} for i, c in enumerate(convo)]
            skeleton = self._render(skeleton_convo, add_generation_prompt)
            found: PromptLayout | None = layout_from_render(
                text, enc.offsets, skeleton, [m.role for m in messages], texts
            )
        except (LayoutMismatch, OpenAIError):
            found = None
        return RenderedChat(ids, found)

    def _render(self, convo: list[dict[str, str]], add_generation_prompt: bool) -> str:
        try:
            text = self._tok.apply_chat_template(
                convo, tokenize=False, add_generation_prompt=add_generation_prompt
            )
        except Exception as exc:  # jinja2 TemplateError and friends: the messages don't fit
            raise OpenAIError(
                400, f"messages could not be rendered by the chat template: {exc}", param="messages"
            ) from exc
        return str(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of a plain completion prompt (with the tokenizer's special tokens)."""
        return list(self._tok.encode(text))

    def vocab_size(self) -> int:
        return len(self._tok)
