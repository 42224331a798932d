"""Preparing a request (pure): validate it, render and tokenize its prompt once, and fix its
sampling options. No I/O beyond the tokenizer.

`RequestPreparer` is built once per router replica; the HTTP layer calls `prepare_chat` or
`prepare_completion` once per request. Both raise `OpenAIError` (4xx) for anything the client
must fix and never touch the cluster.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol

from pdserve.config import PdserveConfig
from pdserve.messages import SamplingOptions
from pdserve.router.errors import OpenAIError
from pdserve.router.openai_models import ChatCompletionRequest, ChatMessage, CompletionRequest


class Tokenizer(Protocol):
    """What preparing needs of the model's tokenizer (router/prompts.py `PromptRenderer`)."""

    def render_chat(self, messages: list[ChatMessage], add_generation_prompt: bool) -> list[int]:
        """Token ids of a chat rendered by the chat template; OpenAIError(400) if it can't."""
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
    """The client's priority (the policy turns it into the engine priority)."""
    stream: bool = False
    """The client asked for an SSE stream (also sets how often decode sends tokens)."""
    include_usage: bool = False
    """Streaming only: send a final usage chunk (stream_options.include_usage)."""


class RequestPreparer:
    """Validates and tokenizes chat and completion requests for one served model."""

    def __init__(self, config: PdserveConfig, tokenizer: Tokenizer):
        self._config = config
        self._tokenizer = tokenizer
        self._vocab_size = tokenizer.vocab_size()

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

    def prepare_chat(self, req: ChatCompletionRequest, request_id: str) -> PreparedRequest:
        self._check_common(req.model, req.unsupported_reason())
        ids = self._tokenizer.render_chat(req.messages, req.add_generation_prompt)
        return self._prepare(
            request_id, ids, req, req.requested_max_tokens(), req.num_logprobs(), "messages"
        )

    def prepare_completion(self, req: CompletionRequest, request_id: str) -> PreparedRequest:
        self._check_common(req.model, req.unsupported_reason())
        prompt = req.single_prompt()
        if not prompt:
            raise OpenAIError(400, "prompt must not be empty", param="prompt")
        if isinstance(prompt, str):
            ids = self._tokenizer.encode(prompt)
        else:
            bad = [t for t in prompt if not 0 <= t < self._vocab_size]
            if bad:
                raise OpenAIError(
                    400,
                    f"prompt token ids must be in [0, {self._vocab_size}); got {bad[:5]}",
                    param="prompt",
                )
            ids = prompt
        return self._prepare(request_id, ids, req, req.max_tokens, req.logprobs, "prompt")

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
            priority=req.priority,
            stream=stream,
            include_usage=bool(
                stream and req.stream_options is not None and req.stream_options.include_usage
            ),
        )
