"""One request's path through the cluster: validate, tokenize once, prefill, hand off, decode.

`CompletionService` is built once per router replica and called by the HTTP layer per
request. It raises `OpenAIError` for anything the client must fix; it never formats HTTP.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from pdserve.config import PdserveConfig
from pdserve.messages import DecodeChunk, DecodeRequest, PrefillRequest, SamplingOptions
from pdserve.router.dispatch import Dispatcher
from pdserve.router.errors import OpenAIError
from pdserve.router.metrics import RouterMetrics
from pdserve.router.openai_models import ChatCompletionRequest, CompletionRequest
from pdserve.router.prompts import PromptRenderer


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A validated, tokenized request, ready to dispatch."""

    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingOptions
    priority: int


@dataclass(frozen=True, slots=True)
class Generation:
    """A dispatched request: its prompt accounting and the decode stream."""

    num_prompt_tokens: int
    num_cached_tokens: int
    chunks: AsyncIterator[DecodeChunk]


class CompletionService:
    """Validates and runs chat and completion requests over a `Dispatcher`."""

    def __init__(
        self,
        config: PdserveConfig,
        renderer: PromptRenderer,
        dispatcher: Dispatcher,
        metrics: RouterMetrics,
    ):
        self._config = config
        self._renderer = renderer
        self._dispatcher = dispatcher
        self._metrics = metrics
        self._vocab_size = renderer.vocab_size()

    @property
    def model_id(self) -> str:
        return self._config.model.served_model_name

    def check_model(self, model: str) -> None:
        if model != self.model_id:
            raise OpenAIError(
                404,
                f"The model '{model}' does not exist; this server serves '{self.model_id}'",
                param="model",
                code="model_not_found",
            )

    def prepare_chat(self, req: ChatCompletionRequest) -> PreparedRequest:
        self._check_common(req.model, req.unsupported_reason())
        ids = self._renderer.render_chat(req.messages, req.add_generation_prompt)
        return self._prepare(ids, req, req.requested_max_tokens(), req.num_logprobs(), "messages")

    def prepare_completion(self, req: CompletionRequest) -> PreparedRequest:
        self._check_common(req.model, req.unsupported_reason())
        prompt = req.single_prompt()
        if isinstance(prompt, str):
            if not prompt:
                raise OpenAIError(400, "prompt must not be empty", param="prompt")
            ids = self._renderer.encode(prompt)
        else:
            if not prompt:
                raise OpenAIError(400, "prompt must not be empty", param="prompt")
            bad = [t for t in prompt if not 0 <= t < self._vocab_size]
            if bad:
                raise OpenAIError(
                    400,
                    f"prompt token ids must be in [0, {self._vocab_size}); got {bad[:5]}",
                    param="prompt",
                )
            ids = prompt
        return self._prepare(ids, req, req.max_tokens, req.logprobs, "prompt")

    def _check_common(self, model: str, unsupported: tuple[str, str] | None) -> None:
        self.check_model(model)
        if unsupported is not None:
            param, message = unsupported
            raise OpenAIError(400, message, param=param, code="unsupported_parameter")

    def _prepare(
        self,
        ids: list[int],
        req: ChatCompletionRequest | CompletionRequest,
        max_tokens: int | None,
        num_logprobs: int | None,
        prompt_param: str,
    ) -> PreparedRequest:
        limit = self._config.model.max_model_len_tokens
        if len(ids) >= limit:
            raise OpenAIError(
                400,
                f"This model's maximum context length is {limit} tokens, but the prompt has "
                f"{len(ids)} tokens. Shorten the prompt.",
                param=prompt_param,
                code="context_length_exceeded",
            )
        room = limit - len(ids)
        if max_tokens is None:
            max_tokens = min(self._config.router.default_max_tokens, room)
        elif max_tokens > room:
            raise OpenAIError(
                400,
                f"This model's maximum context length is {limit} tokens; the prompt has "
                f"{len(ids)} tokens and max_tokens asks for {max_tokens} more "
                f"(at most {room} fit).",
                param="max_tokens",
                code="context_length_exceeded",
            )
        try:
            stop = req.stop_list()
        except ValueError as exc:
            raise OpenAIError(400, str(exc), param="stop") from exc
        sampling = SamplingOptions(
            max_tokens=max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=max(req.top_k, 0),
            min_tokens=min(req.min_tokens, max_tokens),
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
        return PreparedRequest(
            request_id=uuid.uuid4().hex,
            prompt_token_ids=ids,
            sampling=sampling,
            priority=req.priority,
        )

    async def generate(self, prepared: PreparedRequest) -> Generation:
        """Prefill remotely, hand the KV to decode, and return the decode stream.

        Raises before the first chunk if the prefill fails; the caller iterates `chunks`.
        """
        result = await self._dispatcher.prefill(
            PrefillRequest(
                request_id=f"{prepared.request_id}-p",
                prompt_token_ids=prepared.prompt_token_ids,
                priority=prepared.priority,
            )
        )
        chunks = self._dispatcher.decode(
            DecodeRequest(
                request_id=f"{prepared.request_id}-d",
                prompt_token_ids=prepared.prompt_token_ids,
                sampling=prepared.sampling,
                handoff=result.handoff,
                priority=prepared.priority,
            )
        )
        return Generation(
            num_prompt_tokens=result.num_prompt_tokens,
            num_cached_tokens=result.num_cached_tokens,
            chunks=self._count(chunks, result.num_prompt_tokens, result.num_cached_tokens),
        )

    async def _count(
        self, chunks: AsyncIterator[DecodeChunk], num_prompt: int, num_cached: int
    ) -> AsyncIterator[DecodeChunk]:
        first = True
        async for chunk in chunks:
            if first:
                # The decode engine only produces a token after the KV pull succeeded
                # (kv_load_failure_policy=fail), so the first chunk marks a completed handoff.
                first = False
                self._metrics.kv_transfers.inc()
                self._metrics.prompt_tokens.inc(num_prompt)
                self._metrics.cached_prompt_tokens.inc(num_cached)
            self._metrics.generation_tokens.inc(len(chunk.token_ids))
            yield chunk
