"""Consuming a KV handoff and shaping the token stream on the decode engine.

Called by `DecodeServer.generate` once per request. With a handoff, vLLM's NixlConnector
(kv_consumer) first pulls the prompt's KV from the prefill replica named in it; without one
the decode engine prefills locally. Engine outputs are coalesced (coalesce.py) into
`DecodeChunk`s: the first at once (TTFT), then at most one per `batch_interval_s`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from pdserve.decode_pool.coalesce import coalesce
from pdserve.engine.pending import PendingPrefills
from pdserve.engine.server import EngineRequestError, engine_times
from pdserve.kv_transfer.integrity import EXPECT_KEY, VERIFY_KEY
from pdserve.messages import DecodeChunk, DecodeRequest, SamplingOptions, TokenLogprob


def sampling_params(options: SamplingOptions) -> Any:
    """vLLM SamplingParams for the router's validated options (delta outputs)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        max_tokens=options.max_tokens,
        min_tokens=options.min_tokens,
        temperature=options.temperature,
        top_p=options.top_p,
        top_k=options.top_k if options.top_k > 0 else -1,
        seed=options.seed,
        presence_penalty=options.presence_penalty,
        frequency_penalty=options.frequency_penalty,
        repetition_penalty=options.repetition_penalty,
        stop=list(options.stop) or None,
        stop_token_ids=list(options.stop_token_ids) or None,
        ignore_eos=options.ignore_eos,
        include_stop_str_in_output=options.include_stop_str_in_output,
        skip_special_tokens=options.skip_special_tokens,
        logprobs=options.num_logprobs,
        output_kind=RequestOutputKind.DELTA,
    )


def _logprobs(completion: Any, k: int) -> list[TokenLogprob]:
    out: list[TokenLogprob] = []
    for token_id, per_token in zip(completion.token_ids, completion.logprobs or [], strict=False):
        chosen = per_token[token_id]
        ranked = sorted(per_token.items(), key=lambda kv: kv[1].rank)[:k]
        out.append(
            TokenLogprob(
                token=chosen.decoded_token or "",
                token_id=token_id,
                logprob=chosen.logprob,
                top=[(lp.decoded_token or "", tid, lp.logprob) for tid, lp in ranked],
            )
        )
    return out


async def decode_stream(
    engine: Any,
    request: DecodeRequest,
    replica_id: str,
    pending: PendingPrefills,
    kv_verdict: Callable[[str], str | None] = lambda _: None,
) -> AsyncIterator[DecodeChunk]:
    """Generate `request` on `engine` (a vLLM AsyncLLM), pulling its KV first when
    `request.handoff` is set, else prefilling it here (counted in `pending` until its first
    token). Closing or cancelling the iteration aborts the engine request; raises
    EngineRequestError when the engine ends it with an error (e.g. a failed pull).
    `kv_verdict(request_id)`: why the engine recomputed the prompt instead of using the
    handoff (the engine's integrity checks, read once), carried on the first chunk that
    knows it."""
    from vllm.inputs import TokensPrompt

    params = sampling_params(request.sampling)
    if request.handoff is not None:
        kv_params = request.handoff.to_decode_params()
        if request.verify_kv:
            kv_params[VERIFY_KEY] = True
            kv_params[EXPECT_KEY] = request.prefill_request_id
        params.extra_args = {"kv_transfer_params": kv_params}
    verdict: str | None = None
    k = request.sampling.num_logprobs
    num_prompt = len(request.prompt_token_ids)
    first = True
    if request.handoff is None:
        pending.add(request.request_id, num_prompt - request.expected_cached_tokens)
    outputs = engine.generate(
        TokensPrompt(prompt_token_ids=request.prompt_token_ids),
        params,
        request.request_id,
        priority=request.priority,
    )
    try:
        async for output in coalesce(outputs, request.batch_interval_s):
            pending.done(request.request_id)  # prefilled: its first token is out
            completion = output.outputs[0]
            finish = completion.finish_reason if output.finished else None
            if finish == "error" or finish == "abort":
                raise EngineRequestError(
                    f"decode of {request.request_id} failed in the engine ({finish}); "
                    "the KV pull from prefill may have failed"
                )
            recomputed = None
            if request.verify_kv and verdict is None:
                verdict = recomputed = kv_verdict(request.request_id)
            yield DecodeChunk(
                text=completion.text,
                token_ids=list(completion.token_ids),
                logprobs=_logprobs(completion, k) if k is not None else None,
                finish_reason=finish,
                stop_reason=completion.stop_reason if output.finished else None,
                num_prompt_tokens=num_prompt,
                num_cached_tokens=output.num_cached_tokens or 0,
                engine_times=engine_times(output) if first else None,
                replica_id=replica_id if first else "",
                kv_recomputed=recomputed,
            )
            first = False
    finally:
        pending.done(request.request_id)
