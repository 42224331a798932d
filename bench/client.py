"""HTTP adapter: stream one OpenAI request with httpx and measure it.

One `BenchClient` per run (HTTP/1.1 keep-alive pool sized to the concurrency); the runner
calls `send` once per request and `close()` at the end. `send` never raises for a failed
request (HTTP >= 400, stream error event, timeout, connection error): it returns a
`RequestResult` with `error` set. Cancellation (Ctrl-C) propagates.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from pdserve.bench.models import RequestResult, RequestSpec, Usage
from pdserve.bench.payload import PATHS, request_body, request_headers
from pdserve.bench.sse import StreamChunk, aiter_events, error_message, read_chunk
from pdserve.router.auth import client_headers

Clock = Callable[[], float]


class BenchError(RuntimeError):
    """The benchmark cannot run (server unreachable, no model, calibration failed)."""


@dataclass
class _Timeline:
    """Mutable per-request measurements, turned into a frozen RequestResult at the end."""

    start: float
    first_choice: float | None = None
    first_content: float | None = None
    last_content: float | None = None
    gaps: list[float] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    usage: Usage | None = None
    error: str | None = None
    num_content_chunks: int = 0
    retry_after_s: float | None = None
    stages: tuple[tuple[str, float], ...] = ()

    def add(self, chunk: StreamChunk, now: float) -> None:
        if chunk.error is not None:
            self.error = chunk.error
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.stages:
            self.stages = chunk.stages
        if chunk.has_choice and self.first_choice is None:
            self.first_choice = now
        if chunk.text:
            self.texts.append(chunk.text)
            self.num_content_chunks += 1
            if self.first_content is None:
                self.first_content = now
            else:
                self.gaps.append(now - (self.last_content or now))
            self.last_content = now


class BenchClient:
    def __init__(
        self,
        url: str,
        concurrency: int,
        request_timeout_s: float,
        clock: Clock = time.perf_counter,
        transport: httpx.AsyncBaseTransport | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`transport` replaces the network (tests pass an `httpx.MockTransport`); `tls` is a
        TLS context to share between clients (building one reads the CA bundle, ~20 ms)."""
        pool = concurrency + 2  # + the model list and calibration requests
        self._http = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers=client_headers(os.environ),
            transport=transport,
            verify=tls if tls is not None else True,
            http2=False,
            limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
            timeout=httpx.Timeout(request_timeout_s, connect=min(30.0, request_timeout_s)),
        )
        self._timeout_s = request_timeout_s
        self._clock = clock

    async def close(self) -> None:
        await self._http.aclose()

    async def list_models(self) -> list[str]:
        """Model ids from GET /v1/models; BenchError when the server cannot say."""
        try:
            resp = await self._http.get("/v1/models")
            resp.raise_for_status()
            return [str(m["id"]) for m in resp.json().get("data", [])]
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise BenchError(f"GET {self._http.base_url}/v1/models failed: {exc!r}") from exc

    async def probe(self, path: str) -> float | None:
        """Seconds one GET of `path` took to answer 200 (body read); None: it failed."""
        start = self._clock()
        try:
            resp = await self._http.get(path)
            await resp.aread()
        except httpx.HTTPError:
            return None
        return self._clock() - start if resp.status_code == 200 else None

    async def send(
        self, spec: RequestSpec, model: str, policy: str | None, t0: float
    ) -> RequestResult:
        """Stream `spec`; `t0` is the phase start on this client's clock."""
        tl = _Timeline(start=self._clock())
        status: int | None = None
        try:
            async with asyncio.timeout(self._timeout_s):
                status = await self._stream(spec, model, policy, tl)
        except TimeoutError:
            tl.error = f"timed out after {self._timeout_s:g} s (--request-timeout-s)"
        except httpx.HTTPError as exc:
            tl.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        end = self._clock()
        if tl.error is None and status is not None and status >= 400:
            tl.error = f"HTTP {status}"
        usage = tl.usage
        completion = usage.completion_tokens if usage else tl.num_content_chunks
        first = tl.first_content if tl.first_content is not None else tl.first_choice
        return RequestResult(
            index=spec.index,
            request_class=spec.request_class,
            start_s=tl.start - t0,
            e2e_s=end - tl.start,
            ttft_s=None if first is None else first - tl.start,
            chunk_gaps_s=tuple(tl.gaps),
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=completion,
            cached_tokens=usage.cached_tokens if usage else None,
            text="".join(tl.texts),
            error=tl.error,
            status=status,
            agent=spec.agent,
            step=spec.step,
            retry_after_s=tl.retry_after_s,
            stages=tl.stages,
            prompt_cost=usage.prompt_cost if usage else None,
        )

    async def _stream(
        self, spec: RequestSpec, model: str, policy: str | None, tl: _Timeline
    ) -> int:
        body = request_body(spec, model)
        headers = request_headers(policy, spec.conversation)
        async with self._http.stream(
            "POST", PATHS[spec.endpoint], json=body, headers=headers
        ) as resp:
            if resp.status_code >= 400:
                raw = await resp.aread()
                tl.error = f"HTTP {resp.status_code}: {_http_error(raw)}"
                tl.retry_after_s = _retry_after_s(resp.headers.get("retry-after"))
                return resp.status_code
            async for event in aiter_events(resp):
                if self._take(read_chunk(event), tl):
                    break
            return resp.status_code

    def _take(self, chunk: StreamChunk, tl: _Timeline) -> bool:
        """Record a chunk; True when the stream is finished ([DONE] or an error)."""
        tl.add(chunk, self._clock())
        return chunk.done or chunk.error is not None


def _retry_after_s(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header in its delay-seconds form (None otherwise)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


def _http_error(raw: bytes) -> str:
    try:
        message = error_message(json.loads(raw))
    except ValueError:
        message = None
    return message or raw.decode(errors="replace")[:300]
