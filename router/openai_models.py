"""OpenAI request bodies the router accepts, validated with pydantic (pure, no I/O).

Unknown fields are ignored (clients send many optional ones); fields that are known but not
supported are rejected with a clear message by `unsupported_reason()`, never silently dropped.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_STOP_SEQUENCES = 16
"""Most stop strings one request may send (OpenAI allows 4)."""
MAX_STOP_CHARS = 256
"""Longest stop string, in characters."""
MAX_STOP_TOKEN_IDS = 256
"""Most stop_token_ids one request may send."""
SEED_RANGE = (-(2**63), 2**63 - 1)
"""Seeds the engines accept (a 64-bit signed integer)."""
INT32_MAX = 2**31 - 1
"""Bound of integer knobs the engines keep in 32 or 64 bits (top_k, priority): larger values
would fail inside the engine (a 500) instead of here (a 400)."""


class _Body(BaseModel):
    # NaN and +-Infinity (which Python's JSON parser accepts) are never valid sampling values.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class StreamOptions(_Body):
    include_usage: bool = False


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The message content as plain text (text parts joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError(
                    f"content parts of type {part.get('type')!r} are not supported; "
                    "this model accepts text only"
                )
            parts.append(part["text"])
        return "".join(parts)


PositiveInt = Annotated[int, Field(gt=0)]


class _Sampling(_Body):
    """Sampling fields common to chat and completions."""

    model: str = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int = Field(default=0, ge=-1, le=INT32_MAX)
    min_tokens: int = Field(default=0, ge=0)
    seed: int | None = Field(default=None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    presence_penalty: float = Field(default=0.0, ge=-2, le=2)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    repetition_penalty: float = Field(default=1.0, gt=0)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = Field(default=None, max_length=MAX_STOP_TOKEN_IDS)
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    n: int = Field(default=1, ge=1)
    best_of: int | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    priority: int = Field(default=0, ge=-INT32_MAX, le=INT32_MAX)

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        stops = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if len(stops) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop strings are accepted")
        if any(not s for s in stops):
            raise ValueError("stop strings must be non-empty")
        if any(len(s) > MAX_STOP_CHARS for s in stops):
            raise ValueError(f"stop strings must be at most {MAX_STOP_CHARS} characters")
        return stops

    def common_unsupported(self) -> tuple[str, str] | None:
        """(param, message) for a known field this server does not support, else None."""
        if self.n != 1:
            return "n", "n > 1 is not supported; send one request per completion"
        if self.best_of not in (None, 1):
            return "best_of", "best_of > 1 is not supported"
        if self.logit_bias:
            return "logit_bias", "logit_bias is not supported"
        if self.stream_options is not None and not self.stream:
            return "stream_options", "stream_options is only allowed when stream is true"
        return None


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: PositiveInt | None = None
    max_completion_tokens: PositiveInt | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    add_generation_prompt: bool = True

    def unsupported_reason(self) -> tuple[str, str] | None:
        if found := self.common_unsupported():
            return found
        if self.tools:
            return "tools", "tool calling is not supported by this server"
        if self.tool_choice not in (None, "none"):
            return "tool_choice", "tool_choice is not supported by this server"
        if self.response_format and self.response_format.get("type") not in (None, "text"):
            return "response_format", "only response_format type 'text' is supported"
        if self.top_logprobs is not None and not self.logprobs:
            return "top_logprobs", "top_logprobs requires logprobs: true"
        return None

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(_Sampling):
    """POST /v1/completions."""

    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: PositiveInt | None = None
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _one_nonempty_prompt(
        cls, prompt: str | list[int] | list[str] | list[list[int]]
    ) -> str | list[int] | list[str] | list[list[int]]:
        if isinstance(prompt, list):
            if len(prompt) == 0:
                raise ValueError("prompt must not be empty")
            if isinstance(prompt[0], (str, list)) and len(prompt) > 1:
                raise ValueError(
                    "batched prompts (a list of several prompts) are not supported; "
                    "send one request per prompt"
                )
        elif prompt == "":
            raise ValueError("prompt must not be empty")
        return prompt

    def unsupported_reason(self) -> tuple[str, str] | None:
        if found := self.common_unsupported():
            return found
        if self.echo:
            return "echo", "echo is not supported"
        if self.suffix:
            return "suffix", "suffix is not supported"
        return None

    def single_prompt(self) -> str | list[int]:
        """The one prompt, as text or token ids."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return prompt
        first = prompt[0]
        if isinstance(first, int):
            return [int(t) for t in prompt]  # type: ignore[arg-type]
        if isinstance(first, str):
            return first
        return [int(t) for t in first]
