"""Producing a KV handoff: compute a prompt's KV on the prefill engine and keep it there for a
decode engine to pull over NIXL.

Called by `PrefillServer.prefill` once per remote-prefill request. The engine runs the prompt
with `max_tokens=1` and vLLM's remote-decode transfer params; vLLM's NixlConnector
(kv_producer) then holds the KV blocks until a decode engine reads them or
`kv_transfer.kv_lease_seconds` passes (renewed by the decode engine's heartbeats once it
has the request), and describes where they are in the
output's `kv_transfer_params`, which `KVHandoff.from_vllm` wraps at this edge.
"""

from __future__ import annotations

from typing import Any

from pdserve.engine.pending import PendingPrefills
from pdserve.engine.server import EngineRequestError, engine_times
from pdserve.kv_transfer.integrity import VERIFY_KEY
from pdserve.kv_transfer.params import PREFILL_REQUEST_PARAMS, KVHandoff
from pdserve.messages import PrefillRequest, PrefillResult


def _prefill_params(verify: bool) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        max_tokens=1,
        temperature=0.0,
        detokenize=False,
        output_kind=RequestOutputKind.FINAL_ONLY,
        extra_args={"kv_transfer_params": {**PREFILL_REQUEST_PARAMS, VERIFY_KEY: verify}},
    )


async def produce_kv(
    engine: Any, request: PrefillRequest, replica_id: str, pending: PendingPrefills
) -> PrefillResult:
    """Prefill `request` on `engine` (a vLLM AsyncLLM) and return where its KV waits; the
    prompt counts in `pending` until it is done. Cancelling the call aborts the engine
    request; raises EngineRequestError when the engine ends it abnormally, HandoffError when
    vLLM returns no transfer parameters."""
    from vllm.inputs import TokensPrompt

    final = None
    num_prompt = len(request.prompt_token_ids)
    pending.add(request.request_id, num_prompt - request.expected_cached_tokens)
    try:
        async for output in engine.generate(
            TokensPrompt(prompt_token_ids=request.prompt_token_ids),
            _prefill_params(request.verify_kv),
            request.request_id,
            priority=request.priority,
        ):
            final = output
    finally:
        pending.done(request.request_id)
    if final is None:
        raise EngineRequestError(f"prefill of {request.request_id} produced no output")
    completion = final.outputs[0]
    if completion.finish_reason not in ("length", "stop"):
        raise EngineRequestError(
            f"prefill of {request.request_id} failed: finish_reason={completion.finish_reason}"
        )
    return PrefillResult(
        handoff=KVHandoff.from_vllm(final.kv_transfer_params),
        num_prompt_tokens=len(request.prompt_token_ids),
        num_cached_tokens=final.num_cached_tokens or 0,
        engine_times=engine_times(final),
        replica_id=replica_id,
        request_id=request.request_id,
    )
