"""One vLLM engine, in-process, configured for a role (prefill or decode).

Owned by a PrefillServer or DecodeServer replica: built in its constructor, started with
`start()`, closed with `close()`. All methods run on the replica's event loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import zlib
from collections.abc import AsyncIterator
from typing import Any

from pdserve.config import PdserveConfig
from pdserve.engine.args import engine_args
from pdserve.engine.coalesce import coalesce
from pdserve.engine.stats import EngineCounters, EngineStats, stat_logger_factory
from pdserve.kv_transfer.connector_config import Role, engine_environment
from pdserve.kv_transfer.params import PREFILL_REQUEST_PARAMS, KVHandoff
from pdserve.kv_transfer.ports import pick_free_port
from pdserve.messages import (
    DecodeChunk,
    DecodeRequest,
    EngineTimes,
    PrefillRequest,
    PrefillResult,
    SamplingOptions,
    TokenLogprob,
)

log = logging.getLogger("pdserve.engine")


class EngineRequestError(RuntimeError):
    """The engine failed a request (e.g. a failed KV pull under kv_load_failure_policy=fail)."""


def _prepare_process(config: PdserveConfig, role: Role, replica_id: str) -> tuple[int, int | None]:
    """Set this replica's engine environment; return its NIXL side-channel port and its
    KV-event port (None when events are off).

    Must run before the engine starts: the engine process inherits env and niceness.
    """
    # Ray runs workers at a raised nice level and engine processes inherit it; an engine is
    # the work itself, so give it normal priority back (needs root or CAP_SYS_NICE).
    with contextlib.suppress(PermissionError, OSError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    # Spread replicas over the port range so concurrent starts rarely race for one port.
    offset = (zlib.crc32(replica_id.encode()) % 500) * 4
    port = pick_free_port(config.kv_transfer.side_channel_base_port + offset)
    os.environ.update(engine_environment(config, role, port, _node_ip()))
    # Tells `pdserve down` which cluster these engine processes belong to.
    os.environ["PDSERVE_GCS_ADDRESS"] = _gcs_address()
    pool = config.prefill if role == "prefill" else config.decode
    events_port = None
    if pool.engine.kv_events:
        events_port = pick_free_port(config.kv_transfer.kv_events_base_port + offset, "0.0.0.0")
    return port, events_port


def _gcs_address() -> str:
    try:
        import ray

        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # not inside Ray
        return ""


def _node_ip() -> str:
    try:
        import ray

        return str(ray.util.get_node_ip_address())
    except Exception:  # not inside Ray (e.g. a unit test): one machine
        return "127.0.0.1"


def _sampling_params(options: SamplingOptions) -> Any:
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


def _engine_times(output: Any) -> EngineTimes | None:
    m = getattr(output, "metrics", None)
    if m is None or not getattr(m, "first_token_ts", 0.0):
        return None
    return EngineTimes(
        queued_s=m.queued_ts or m.scheduled_ts,
        scheduled_s=m.scheduled_ts,
        first_token_s=m.first_token_ts,
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


class EngineServer:
    """A vLLM AsyncLLM with NixlConnector for one role.

    Call `start()` once (30-60 s on CPU), then `prefill()` (prefill role) or `decode()`
    (decode role) any number of times concurrently; `close()` once at shutdown.
    """

    def __init__(self, config: PdserveConfig, role: Role, model_path: str, replica_id: str):
        self._config = config
        self._role: Role = role
        self._model_path = model_path
        self._replica_id = replica_id
        self._counters = EngineCounters()
        self._engine: Any = None
        self.side_channel_port, self.kv_events_port = _prepare_process(config, role, replica_id)
        self._node_ip = _node_ip()

    async def start(self) -> None:
        """Start the engine and wait until it can serve."""
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            **engine_args(self._config, self._role, self._model_path, self.kv_events_port)
        )
        log.info("starting %s engine (NIXL side channel :%d)", self._role, self.side_channel_port)
        loggers: list[Any] = [stat_logger_factory(self._counters)]
        pool = self._config.prefill if self._role == "prefill" else self._config.decode
        if pool.engine.export_vllm_metrics:
            from vllm.v1.metrics.ray_wrappers import RayPrometheusStatLogger

            loggers.append(RayPrometheusStatLogger)
        self._engine = AsyncLLM.from_engine_args(args, stat_loggers=loggers)

    def stats(self) -> EngineStats:
        """Current engine counters (cheap; no engine round trip)."""
        return self._counters.snapshot()

    def routing_stats(self) -> dict[str, Any]:
        """What the router's replica view needs (Ray Serve polls it; see record_routing_stats).

        Plain JSON-able values; `kv_events_endpoint` None means this engine publishes no KV
        events (the router then falls back to its approximate prefix index).
        """
        s = self._counters.snapshot()
        cache = self._engine.vllm_config.cache_config if self._engine is not None else None
        return {
            "num_running_requests": s.num_running_requests,
            "num_waiting_requests": s.num_waiting_requests,
            "kv_cache_usage": s.kv_cache_usage,
            "block_size_tokens": cache.block_size if cache is not None else 0,
            "num_kv_blocks": (cache.num_gpu_blocks or 0) if cache is not None else 0,
            "kv_events_endpoint": (
                f"tcp://{self._advertised_host()}:{self.kv_events_port}"
                if self.kv_events_port is not None
                else None
            ),
        }

    def _advertised_host(self) -> str:
        return "127.0.0.1" if self._config.platform == "cpu" else self._node_ip

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        """Compute the prompt's KV and keep it for a decode engine to pull over NIXL."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            max_tokens=1,
            temperature=0.0,
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
            extra_args={"kv_transfer_params": dict(PREFILL_REQUEST_PARAMS)},
        )
        final = None
        async for output in self._engine.generate(
            TokensPrompt(prompt_token_ids=request.prompt_token_ids),
            params,
            request.request_id,
            priority=request.priority,
        ):
            final = output
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
            engine_times=_engine_times(final),
            replica_id=self._replica_id,
        )

    async def decode(self, request: DecodeRequest) -> AsyncIterator[DecodeChunk]:
        """Generate, pulling the KV from `request.handoff` first when set.

        Cancelling the iteration aborts the request in the engine.
        """
        from vllm.inputs import TokensPrompt

        params = _sampling_params(request.sampling)
        if request.handoff is not None:
            params.extra_args = {"kv_transfer_params": request.handoff.to_decode_params()}
        k = request.sampling.num_logprobs
        num_prompt = len(request.prompt_token_ids)
        first = True
        outputs = self._engine.generate(
            TokensPrompt(prompt_token_ids=request.prompt_token_ids),
            params,
            request.request_id,
            priority=request.priority,
        )
        async for output in coalesce(outputs, request.batch_interval_s):
            completion = output.outputs[0]
            finish = completion.finish_reason if output.finished else None
            if finish == "error" or finish == "abort":
                raise EngineRequestError(
                    f"decode of {request.request_id} failed in the engine ({finish}); "
                    "the KV pull from prefill may have failed"
                )
            yield DecodeChunk(
                text=completion.text,
                token_ids=list(completion.token_ids),
                logprobs=_logprobs(completion, k) if k is not None else None,
                finish_reason=finish,
                stop_reason=completion.stop_reason if output.finished else None,
                num_prompt_tokens=num_prompt,
                num_cached_tokens=output.num_cached_tokens or 0,
                engine_times=_engine_times(output) if first else None,
                replica_id=self._replica_id if first else "",
            )
            first = False

    def shutdown(self) -> None:
        """Stop the engine process now (idempotent; safe from `__del__`)."""
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None

    async def close(self) -> None:
        """Async form of `shutdown()`."""
        self.shutdown()
