"""Fakes for driving the router's real request path without Ray: a scripted `Dispatcher`, a
word-level tokenizer, and a Placer over replica sources with fixed routing stats."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI

from pdserve.config import AdmissionConfig, PdserveConfig
from pdserve.kv_transfer.params import KVHandoff
from pdserve.messages import (
    DecodeChunk,
    DecodeRequest,
    EngineTimes,
    KVRelease,
    PrefillRequest,
    PrefillResult,
)
from pdserve.router.app import build_app
from pdserve.router.context.layout import MessageSpan, PromptLayout
from pdserve.router.metrics import RouterMetrics
from pdserve.router.observe import RouterObserver
from pdserve.router.openai_models import ChatMessage
from pdserve.router.orchestrate import Orchestrator
from pdserve.router.placement import Placer
from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.prepare import RequestPreparer
from pdserve.router.prompts import RenderedChat
from pdserve.router.replica_view import ReplicaView
from pdserve.router.status import ClusterStatus
from pdserve.router.tenants.gate import TierGates

BLOCK_TOKENS = 16
PREFILL_TIMES = EngineTimes(queued_s=100.0, scheduled_s=100.25, first_token_s=101.0)
DECODE_TIMES = EngineTimes(queued_s=200.0, scheduled_s=200.5, first_token_s=200.75)


class StepClock:
    """A monotonic clock that moves 1 s each time it is read (deterministic timelines)."""

    def __init__(self, start_s: float = 10.0):
        self._ticks = itertools.count()
        self._start = start_s

    def __call__(self) -> float:
        return self._start + next(self._ticks)


def handoff(num_blocks: int) -> KVHandoff:
    return KVHandoff(
        remote_engine_id="engine-p0",
        remote_request_id="req-p",
        remote_block_ids=[list(range(num_blocks))],
        remote_host="127.0.0.1",
        remote_port=15600,
        remote_num_tokens=num_blocks * BLOCK_TOKENS,
        remote_prefill_cached_tokens=0,
    )


def chunks_of(texts: list[str], *, cached: int = 0) -> list[DecodeChunk]:
    """Decode chunks with one token per word; the first carries engine times and replica."""
    out = []
    for i, text in enumerate(texts):
        last = i == len(texts) - 1
        out.append(
            DecodeChunk(
                text=text,
                token_ids=[100 + i],
                finish_reason="length" if last else None,
                num_cached_tokens=cached,
                engine_times=DECODE_TIMES if i == 0 else None,
                replica_id="d0" if i == 0 else "",
            )
        )
    return out


@dataclass
class FakeDispatcher:
    """Records every message; fails where told to. `decode_fail_at` = index of the chunk whose
    delivery fails (0: before the first token)."""

    chunks: list[DecodeChunk] = field(default_factory=lambda: chunks_of([" a", " b", " c"]))
    num_cached_prefill: int = 3
    prefill_error: Exception | None = None
    prefill_hangs: bool = False
    prefill_hangs_on: frozenset[str] = frozenset()
    """Prefill replicas whose every prefill hangs (a frozen engine)."""
    prefill_fails_on: frozenset[str] = frozenset()
    """Prefill replicas whose every prefill fails (a dead or broken replica)."""
    decode_fail_at: int | None = None
    decode_fails_on: frozenset[str] = frozenset()
    """Decode replicas whose every decode fails before its first token (a dead replica)."""
    decode_hang_at: int | None = None
    """Index of the chunk before which decode goes silent (a frozen engine)."""
    chunk_delay_s: float = 0.0
    prefills: list[PrefillRequest] = field(default_factory=list)
    decodes: list[DecodeRequest] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    """Request ids whose call was cancelled or whose stream was closed before its end (the
    engine would abort them)."""
    completed: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    """Prefill request ids whose KV the router asked a decode replica to free."""

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        self.prefills.append(request)
        await asyncio.sleep(0)
        if self.prefill_hangs or request.target_replica_id in self.prefill_hangs_on:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.aborted.append(request.request_id)
                raise
        if self.prefill_error is not None:
            raise self.prefill_error
        if request.target_replica_id in self.prefill_fails_on:
            raise RuntimeError(f"prefill replica {request.target_replica_id} died")
        blocks = len(request.prompt_token_ids) // BLOCK_TOKENS
        return PrefillResult(
            handoff=handoff(blocks),
            num_prompt_tokens=len(request.prompt_token_ids),
            num_cached_tokens=self.num_cached_prefill,
            engine_times=PREFILL_TIMES,
            replica_id=request.target_replica_id or "p0",
            request_id=request.request_id,
        )

    async def decode(self, request: DecodeRequest) -> AsyncGenerator[DecodeChunk, None]:
        self.decodes.append(request)
        finished = False
        try:
            if request.target_replica_id in self.decode_fails_on:
                raise RuntimeError(f"decode replica {request.target_replica_id} died")
            for i, chunk in enumerate(self.chunks):
                await asyncio.sleep(self.chunk_delay_s)
                if self.decode_hang_at == i:
                    await asyncio.sleep(3600)
                if self.decode_fail_at == i:
                    raise RuntimeError(f"decode engine failed at chunk {i}")
                yield chunk
            finished = True
            self.completed.append(request.request_id)
        finally:
            if not finished:
                self.aborted.append(request.request_id)

    async def release(self, request: KVRelease) -> None:
        self.released.append(request.handoff.remote_request_id)

    async def pools_ready(self, timeout_seconds: float) -> dict[str, bool]:
        return {"prefill": True, "decode": True}


class FixedSource:
    """A pool's replicas with fixed routing stats (what Ray Serve's request router reports)."""

    def __init__(self, replica_ids: list[str], healthy: bool = True):
        stats: dict[str, Any] = {
            "num_running_requests": 0,
            "num_waiting_requests": 0,
            "kv_cache_usage": 0.0,
            "block_size_tokens": BLOCK_TOKENS,
            "num_kv_blocks": 1000,
            "kv_events_endpoint": None,
        }
        self._replicas = [(rid, dict(stats) if healthy else {}) for rid in replica_ids]

    def replicas(self) -> list[tuple[str, dict[str, Any]]]:
        return self._replicas


def router_app(
    config: PdserveConfig,
    dispatcher: FakeDispatcher,
    the_placer: Placer,
    metrics: RouterMetrics,
    gates: TierGates | None = None,
    **app_args: Any,
) -> FastAPI:
    """The router's real app (`build_app`) over `dispatcher`, with the word tokenizer;
    `gates`: the tiers' fair queues (None: none)."""
    return build_app(
        RequestPreparer(config, WordTokenizer()),
        Orchestrator(config.router, dispatcher, the_placer, gates=gates),
        RouterObserver(metrics, the_placer),
        ClusterStatus(the_placer, dispatcher),
        **app_args,
    )


def placer(
    *,
    local_prefill_max_cold_tokens: int = 0,
    decode_healthy: bool = True,
    clock: StepClock | None = None,
    admission: AdmissionConfig | None = None,
    prefill_replicas: tuple[str, ...] = ("p0",),
    decode_replicas: tuple[str, ...] = ("d0",),
) -> Placer:
    """A real Placer (policy 'pdserve') over prefill replicas `prefill_replicas` (default one,
    'p0') and decode replicas `decode_replicas` (default one, 'd0')."""
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    view.attach("prefill", FixedSource(list(prefill_replicas)))
    view.attach("decode", FixedSource(list(decode_replicas), healthy=decode_healthy))
    config = PolicyConfig(
        block_size_tokens=BLOCK_TOKENS, local_prefill_max_cold_tokens=local_prefill_max_cold_tokens
    )
    return Placer(config, view, clock or StepClock(1000.0), policy="pdserve", admission=admission)


class WordTokenizer:
    """One token per whitespace-separated word (ids from a fixed vocabulary of 1,000)."""

    def render_chat(
        self, messages: list[ChatMessage], add_generation_prompt: bool, *, layout: bool = False
    ) -> RenderedChat:
        """Template: one bos token (1), then per message its content words; the layout puts
        the bos in the first message's segment."""
        ids, spans = [1], []
        for i, m in enumerate(messages):
            start = len(ids)
            ids.extend(self.encode(m.text()))
            spans.append(MessageSpan(i, m.role, 0 if i == 0 else start, start, len(ids)))
        found = PromptLayout(len(ids), tuple(spans)) if layout else None
        return RenderedChat(ids, found)

    def encode(self, text: str) -> list[int]:
        return [len(word) % 1000 for word in text.split()]

    def vocab_size(self) -> int:
        return 1000
