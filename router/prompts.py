"""Prompt rendering and tokenization with the model's own tokenizer and chat template.

The router tokenizes every request exactly once, here; the token ids travel to the engines
(which then skip their own tokenization) and feed routing decisions.
"""

from __future__ import annotations

from typing import Any

from pdserve.router.errors import OpenAIError
from pdserve.router.openai_models import ChatMessage


class PromptRenderer:
    """Wraps a Hugging Face tokenizer. Built once per router replica; thread-compatible."""

    def __init__(self, model_path: str):
        from transformers import AutoTokenizer

        self._tok: Any = AutoTokenizer.from_pretrained(model_path)
        if not getattr(self._tok, "chat_template", None):
            self._tok.chat_template = None
        self.eos_token_id: int | None = self._tok.eos_token_id

    def render_chat(self, messages: list[ChatMessage], add_generation_prompt: bool) -> list[int]:
        """Token ids of the chat, rendered by the model's chat template."""
        if self._tok.chat_template is None:
            raise OpenAIError(
                400, "this model has no chat template; use /v1/completions", param="messages"
            )
        try:
            convo = [
                {"role": m.role, "content": m.text(), **({"name": m.name} if m.name else {})}
                for m in messages
            ]
        except ValueError as exc:
            raise OpenAIError(400, str(exc), param="messages") from exc
        try:
            ids = self._tok.apply_chat_template(
                convo, tokenize=True, add_generation_prompt=add_generation_prompt
            )
        except Exception as exc:  # jinja2 TemplateError and friends: the messages don't fit
            raise OpenAIError(
                400, f"messages could not be rendered by the chat template: {exc}", param="messages"
            ) from exc
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return list(ids)

    def encode(self, text: str) -> list[int]:
        """Token ids of a plain completion prompt (with the tokenizer's special tokens)."""
        return list(self._tok.encode(text))

    def vocab_size(self) -> int:
        return len(self._tok)
