"""Preparing a request (pure): validate it, render and tokenize its prompt once, and fix its
sampling options. No I/O beyond the tokenizer.

`RequestPreparer` is built once per router replica; the HTTP layer calls `prepare_chat` or
`prepare_completion` once per request. Both raise `OpenAIError` (4xx) for anything the client
must fix and never touch the cluster.
"""

from __future__ import annotations

import uuid
from array import array
from dataclasses import dataclass, replace
from typing import Protocol

from pdserve.config import PdserveConfig
from pdserve.messages import SamplingOptions
from pdserve.router.context.breaks import (
    BYTES_PER_TOKEN,
    CacheBreak,
    ConversationTracker,
    conversation_key,
)
from pdserve.router.context.layout import PromptLayout
from pdserve.router.errors import OpenAIError
from pdserve.router.openai_models import ChatCompletionRequest, ChatMessage, CompletionRequest
from pdserve.router.prompts import RenderedChat


class Tokenizer(Protocol):
    """What preparing needs of the model's tokenizer (router/prompts.py `PromptRenderer`)."""

    def render_chat(
        self, messages: list[ChatMessage], add_generation_prompt: bool, *, layout: bool = False
    ) -> RenderedChat:
        """Token ids of a chat rendered by the chat template (and, with `layout`, which
        tokens belong to which message, None when unknown); OpenAIError(400) if it can't."""
        ...

    def encode(self, text: str) -> list[int]: ...

    def vocab_size(self) -> int: ...


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A validated, tokenized request, ready to place and dispatch."""

    request_id: str
    """The client-facing id (x-request-id)."""
    engine_request_id: str
    """Unique per attempt even when a client reuses its x-request-id; engines append -p/-d."""
    prompt_token_ids: list[int]
    sampling: SamplingOptions
    priority: int
    """The client's priority when router.allow_client_priority, else 0 (the policy turns it
    into the engine priority)."""
    stream: bool = False
    """The client asked for an SSE stream (also sets how often decode sends tokens)."""
    include_usage: bool = False
    """Streaming only: send a final usage chunk (stream_options.include_usage)."""
    layout: PromptLayout | None = None
    """Which prompt tokens belong to which chat message (None: a completion, prompt cost
    off, or a template the layout cannot follow)."""
    cache_break: CacheBreak | None = None
    """Where this prompt stopped repeating its conversation's previous one (None: no break,
    no earlier request known, or detection off)."""


class RequestPreparer:
    """Validates and tokenizes chat and completion requests for one served model."""

    def __init__(
        self,
        config: PdserveConfig,
        tokenizer: Tokenizer,
        conversations: ConversationTracker | None = None,
    ):
        """`conversations` None: no cache-break detection."""
        self._config = config
        self._tokenizer = tokenizer
        self._vocab_size = tokenizer.vocab_size()
        cost = config.router.prompt_cost
        self._layouts = cost.enabled
        self._conversations = conversations if cost.enabled and cost.detect_cache_breaks else None
        self._key_from_user = cost.conversation_key_from_user

    @property
    def conversations(self) -> ConversationTracker | None:
        """The cache-break detector's state (None: detection off)."""
        return self._conversations

    @property
    def model_id(self) -> str:
        return self._config.model.served_model_name

    def check_model(self, model: str) -> None:
        """404 unless `model` is the served model."""
        if model != self.model_id:
            raise OpenAIError(
                404,
                f"The model '{model}' does not exist; this server serves '{self.model_id}'",
                param="model",
                code="model_not_found",
            )

    def prepare_chat(
        self,
        req: ChatCompletionRequest,
        request_id: str,
        conversation: str | None = None,
        caller: str = "",
    ) -> PreparedRequest:
        """`conversation`: the x-pdserve-conversation header, if sent; `caller`: the
        request's credentials (its Authorization header), which scope its conversations."""
        self._check_common(req.model, req.unsupported_reason())
        for i, message in enumerate(req.messages):
            try:
                text = message.text()
            except ValueError:  # a non-text part: the renderer answers it with a 400
                continue
            _check_unicode(text, f"messages[{i}].content")
        rendered = self._tokenizer.render_chat(
            req.messages, req.add_generation_prompt, layout=self._layouts
        )
        ids, layout = rendered.token_ids, rendered.layout
        prepared = self._prepare(
            request_id, ids, req, req.requested_max_tokens(), req.num_logprobs(), "messages"
        )
        found = self._observe(conversation, req.user, ids, layout, caller)
        return replace(prepared, layout=layout, cache_break=found)

    def prepare_completion(
        self,
        req: CompletionRequest,
        request_id: str,
        conversation: str | None = None,
        caller: str = "",
    ) -> PreparedRequest:
        """As `prepare_chat`."""
        self._check_common(req.model, req.unsupported_reason())
        prompt = req.single_prompt()
        if not prompt:
            raise OpenAIError(400, "prompt must not be empty", param="prompt")
        if isinstance(prompt, str):
            _check_unicode(prompt, "prompt")
            try:
                ids = self._tokenizer.encode(prompt)
            except Exception as exc:  # the tokenizer rejects this text
                raise OpenAIError(
                    400, f"the prompt could not be tokenized: {exc}", param="prompt"
                ) from exc
        else:
            bad = [t for t in prompt if not 0 <= t < self._vocab_size]
            if bad:
                raise OpenAIError(
                    400,
                    f"prompt token ids must be in [0, {self._vocab_size}); got {bad[:5]}",
                    param="prompt",
                )
            ids = prompt
        prepared = self._prepare(request_id, ids, req, req.max_tokens, req.logprobs, "prompt")
        found = self._observe(conversation, req.user, ids, None, caller)
        return replace(prepared, cache_break=found)

    def _observe(
        self,
        header: str | None,
        user: str | None,
        ids: list[int],
        layout: PromptLayout | None,
        caller: str,
    ) -> CacheBreak | None:
        """Only for a request that is valid (prepared): compare it with the previous request
        of its conversation (None: no break, or not tracked). The conversation is the
        header's, else the `user` field's (when configured), else a chat prompt's opening
        (its tokens to the end of its first non-system message)."""
        if self._conversations is None:
            return None
        tokens = array("i", ids).tobytes()  # once: the opening key and the comparison
        if header:
            key = conversation_key("header", header, caller)
        elif user and self._key_from_user:
            key = conversation_key("user", user, caller)
        else:
            opening = (
                next((m for m in layout.messages if m.part != "system"), None) if layout else None
            )
            if opening is None:
                return None
            key = conversation_key("opening", tokens[: opening.end * BYTES_PER_TOKEN], caller)
        return self._conversations.observe(key, tokens, layout)

    def _check_common(self, model: str, unsupported: tuple[str, str] | None) -> None:
        self.check_model(model)
        if unsupported is not None:
            param, message = unsupported
            raise OpenAIError(400, message, param=param, code="unsupported_parameter")

    def _max_tokens(self, num_prompt: int, max_tokens: int | None, prompt_param: str) -> int:
        """The completion budget: the client's, checked against the context window, or the
        default cut to what fits."""
        limit = self._config.model.max_model_len_tokens
        if num_prompt >= limit:
            raise OpenAIError(
                400,
                f"This model's maximum context length is {limit} tokens, but the prompt has "
                f"{num_prompt} tokens. Shorten the prompt.",
                param=prompt_param,
                code="context_length_exceeded",
            )
        room = limit - num_prompt
        if max_tokens is None:
            return min(self._config.router.default_max_tokens, room)
        if max_tokens > room:
            raise OpenAIError(
                400,
                f"This model's maximum context length is {limit} tokens; the prompt has "
                f"{num_prompt} tokens and max_tokens asks for {max_tokens} more "
                f"(at most {room} fit).",
                param="max_tokens",
                code="context_length_exceeded",
            )
        return max_tokens

    def _prepare(
        self,
        request_id: str,
        ids: list[int],
        req: ChatCompletionRequest | CompletionRequest,
        max_tokens: int | None,
        num_logprobs: int | None,
        prompt_param: str,
    ) -> PreparedRequest:
        budget = self._max_tokens(len(ids), max_tokens, prompt_param)
        try:
            stop = req.stop_list()
        except ValueError as exc:
            raise OpenAIError(400, str(exc), param="stop") from exc
        for s in stop:
            _check_unicode(s, "stop")
        bad_ids = [t for t in req.stop_token_ids or () if not 0 <= t < self._vocab_size]
        if bad_ids:
            raise OpenAIError(
                400,
                f"stop_token_ids must be in [0, {self._vocab_size}); got {bad_ids[:5]}",
                param="stop_token_ids",
            )
        sampling = SamplingOptions(
            max_tokens=budget,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=max(req.top_k, 0),
            min_tokens=min(req.min_tokens, budget),
            seed=req.seed,
            presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty,
            repetition_penalty=req.repetition_penalty,
            stop=stop,
            stop_token_ids=tuple(req.stop_token_ids or ()),
            ignore_eos=req.ignore_eos,
            include_stop_str_in_output=req.include_stop_str_in_output,
            skip_special_tokens=req.skip_special_tokens,
            num_logprobs=num_logprobs,
        )
        stream = bool(req.stream)
        return PreparedRequest(
            request_id=request_id,
            engine_request_id=f"{request_id}-{uuid.uuid4().hex[:8]}",
            prompt_token_ids=ids,
            sampling=sampling,
            # Only the router's policy orders the engines' queues unless clients may (a client
            # priority would otherwise let anyone jump every queue).
            priority=req.priority if self._config.router.allow_client_priority else 0,
            stream=stream,
            include_usage=bool(
                stream and req.stream_options is not None and req.stream_options.include_usage
            ),
        )


def _check_unicode(text: str, param: str) -> None:
    """400 unless `text` is valid Unicode (JSON's \\uD800-style escapes can carry lone
    surrogates, which no tokenizer or engine can handle)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise OpenAIError(
            400,
            f"'{param}' is not valid Unicode: a lone surrogate at character {exc.start}",
            param=param,
            code="invalid_unicode",
        ) from exc
