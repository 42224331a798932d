"""The decode engine's scheduler: vLLM's, with each step's prompt chunk sized by the streams'
ITL budget, and the steps that carry prefill next to decoding streams measured.

vLLM loads this class in the engine-core process (`scheduler_cls`, set by
pdserve.engine.args for the decode engines of a disaggregated deployment when
`router.routing.itl_slo_s` is set); its settings come in `additional_config["pdserve_itl"]`
(`ItlSettings.to_config`). Each step, before vLLM's own scheduling:

- count the streams decoding (running requests past their prompt) and the prompts being
  computed (running ones not past it, and waiting ones that do not wait for a KV pull);
- when both are present, cap each prompt's tokens this step (vLLM's
  `long_prefill_token_threshold`) at the ITL budget's chunk, `chunk_tokens` of
  pdserve.itl_budget (the rule the router's ITL guard predicts with), split between the
  prompts, at least `min_chunk_tokens`, never above the configured threshold; otherwise the
  configured threshold applies as vLLM would.

After the step's forward pass (`update_from_output`), a step that computed prompt tokens
(some request scheduled more than one token) while streams decoded is recorded as
(step seconds, streams); vLLM's step stats carry the records (`STALL_KEY`) to the replica's
stat logger (pdserve.engine.stats), which makes them `pdserve_decode_stall_seconds`.

Single-threaded: vLLM calls all of this from its engine-core loop.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from pdserve.itl_budget import STALL_KEY, ItlSettings, chunk_tokens

MAX_PENDING_RECORDS = 10_000
"""Stall records kept between two stats reports (older ones dropped)."""


class _ItlBudget:
    """The per-step rule and measurement, mixed into vLLM's scheduler classes."""

    running: Any
    waiting: Any
    scheduler_config: Any
    vllm_config: Any
    max_num_scheduled_tokens: int

    def _itl_init(self) -> None:
        extra = getattr(self.vllm_config, "additional_config", None) or {}
        self._itl = ItlSettings.from_config(extra)
        self._configured_threshold: int = self.scheduler_config.long_prefill_token_threshold
        self._steps: deque[tuple[float | None, int]] = deque()
        """Scheduled steps awaiting their output, oldest first: (start if the step carries
        prefill next to streams, else None; streams)."""
        self._stalls: list[list[float]] = []

    def _census(self) -> tuple[int, int, int, int]:
        """(decoding streams, their context tokens, prompts being computed, most prompt
        tokens computed so far among them)."""
        streams = stream_context = prompts = context = 0
        for r in self.running:
            if r.num_computed_tokens >= r.num_prompt_tokens:
                streams += 1
                stream_context += r.num_computed_tokens
            else:
                prompts += 1
                context = max(context, r.num_computed_tokens)
        for r in self.waiting:
            if r.status != RequestStatus.WAITING_FOR_REMOTE_KVS:
                prompts += 1
        return streams, stream_context, prompts, context

    def _threshold(self) -> int:
        """This step's long_prefill_token_threshold (0 = no cap)."""
        settings = self._itl
        if settings is None:
            return self._configured_threshold
        streams, stream_context, prompts, context = self._census()
        if not streams or not prompts:
            return self._configured_threshold
        allowance = chunk_tokens(
            settings,
            settings.itl_slo_s,
            streams,
            context,
            self.max_num_scheduled_tokens,
            stream_context,
        )
        per_prompt = max(settings.min_chunk_tokens, allowance // prompts)
        if self._configured_threshold > 0:
            per_prompt = min(per_prompt, self._configured_threshold)
        return per_prompt

    def _before_schedule(self) -> None:
        self.scheduler_config.long_prefill_token_threshold = self._threshold()

    def _after_schedule(self, out: Any) -> None:
        self.scheduler_config.long_prefill_token_threshold = self._configured_threshold
        counts = out.num_scheduled_tokens.values()
        prefill = any(n > 1 for n in counts)
        streams = sum(1 for n in counts if n == 1)
        self._steps.append((time.monotonic() if prefill and streams else None, streams))

    def _before_update(self) -> None:
        if not self._steps:
            return
        started_s, streams = self._steps.popleft()
        if started_s is None:
            return
        self._stalls.append([time.monotonic() - started_s, streams])
        if len(self._stalls) > MAX_PENDING_RECORDS:
            del self._stalls[: len(self._stalls) - MAX_PENDING_RECORDS]

    def _with_stalls(self, stats: Any) -> Any:
        if stats is None or not self._stalls:
            return stats
        payload = stats.kv_connector_stats
        if payload is None:
            # A connector's stat logger expects its own keys in every payload: start from its
            # empty stats (none without a connector).
            connector = getattr(self, "connector", None)
            empty = type(connector).build_kv_connector_stats() if connector is not None else None
            payload = empty.to_dict() if empty is not None else {}
        payload = dict(payload)
        payload[STALL_KEY] = self._stalls
        stats.kv_connector_stats = payload
        self._stalls = []
        return stats

    # vLLM's scheduler interface, around the base class's (cooperative: the concrete classes
    # put this mixin first, so super() is vLLM's Scheduler or AsyncScheduler).

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._itl_init()

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self._before_schedule()
        try:
            out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            self.scheduler_config.long_prefill_token_threshold = self._configured_threshold
            raise
        self._after_schedule(out)
        return out

    def update_from_output(self, *args: Any, **kwargs: Any) -> Any:
        self._before_update()
        return super().update_from_output(*args, **kwargs)  # type: ignore[misc]

    def make_stats(self, *args: Any, **kwargs: Any) -> Any:
        return self._with_stalls(super().make_stats(*args, **kwargs))  # type: ignore[misc]


class ItlBudgetScheduler(_ItlBudget, Scheduler):  # type: ignore[misc]  # vLLM is Any to mypy
    """vLLM's synchronous scheduler (CPU engines) with the ITL budget."""


class ItlBudgetAsyncScheduler(_ItlBudget, AsyncScheduler):  # type: ignore[misc]
    """vLLM's asynchronous scheduler (GPU engines) with the ITL budget. With async
    scheduling the next step is scheduled while the current one runs, so a recorded step's
    seconds run from its scheduling to its output: an upper bound of its forward pass."""
