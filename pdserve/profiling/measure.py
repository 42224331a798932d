"""Measure prefill and decode on a running pdserve cluster through its OpenAI API (httpx).

One `Profiler` per run; `run()` sends the plan's requests (prefill ones one at a time, decode
ones B at a time) and returns the samples. Every failure (unreachable, not ready, HTTP error,
error event in a stream, timeout) raises ProfileError with a message for the user.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from pdserve.bench.sse import aiter_events, error_message, read_chunk
from pdserve.profiling.plan import ProfilePlan, decode_batch_prompts, random_tokens
from pdserve.profiling.samples import (
    DecodeBatch,
    LocalPrefillSample,
    ProfileError,
    ServingSample,
    local_prefill_sample,
    prefill_sample,
    serving_sample,
    tpot_s,
)
from pdserve.router.auth import client_headers
from pdserve.router.headers import ITL_GUARD_HEADER
from pdserve.router.policy.cost_model import PrefillSample

Progress = Callable[[str], None]
"""Called once per completed request with a short description of the current phase."""


@dataclass
class Measurements:
    """What one run measured. `skipped_local_prefills`: requests meant for the prefill line
    that the router prefilled on the decode engine (no prefill stage to read)."""

    prefill: list[PrefillSample] = field(default_factory=list)
    batches: list[DecodeBatch] = field(default_factory=list)
    serving: list[ServingSample] = field(default_factory=list)
    """The serving stages around each measured remote prefill (for the simulator)."""
    local_prefill: list[LocalPrefillSample] = field(default_factory=list)
    """The plan's local prefills: the decode engine's first step of each (for the simulator)."""
    skipped_local_prefills: int = 0


@dataclass(frozen=True, slots=True)
class _Stream:
    client_tpot_s: float | None
    router_tpot_s: float | None


class Profiler:
    def __init__(
        self,
        url: str,
        plan: ProfilePlan,
        *,
        model: str | None = None,
        seed: int | None = None,
        timeout_s: float = 120.0,
        progress: Progress = lambda _: None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`model`: the id to send (None = the first of /v1/models). `transport` replaces the
        network (tests). `seed`: of the prompt token ids; None = a fresh one (an earlier run's
        prompts are in the prefix cache)."""
        self.url = url.rstrip("/")
        self.plan = plan
        self.model = model
        self._rng = random.Random(seed)
        self._progress = progress
        self._timeout_s = timeout_s
        self._transport = transport

    async def run(self) -> Measurements:
        """Check the cluster, warm it up, then measure prefill and decode."""
        pool = max(self.plan.decode_batch_sizes, default=1) + 2
        async with httpx.AsyncClient(
            base_url=self.url,
            headers=client_headers(os.environ),
            transport=self._transport,
            limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
            timeout=httpx.Timeout(self._timeout_s, connect=min(10.0, self._timeout_s)),
        ) as http:
            try:
                return await self._run(http)
            except httpx.ConnectError as exc:
                raise ProfileError(
                    f"cannot reach {self.url} ({exc}): is the cluster running? "
                    "Start it with `pdserve up --detach --config ...`"
                ) from exc
            except httpx.TimeoutException as exc:
                raise ProfileError(
                    f"request to {self.url} timed out after {self._timeout_s:g} s "
                    f"({type(exc).__name__}); raise --timeout or check the cluster"
                ) from exc
            except httpx.HTTPError as exc:
                raise ProfileError(f"HTTP error talking to {self.url}: {exc!r}") from exc

    async def _run(self, http: httpx.AsyncClient) -> Measurements:
        await self._check(http)
        out = Measurements()
        plan = self.plan
        for _ in range(plan.warmup_requests):
            await self._complete(http, random_tokens(self._rng, 512))
            self._progress("warm-up")
        for _ in range(plan.repeats):
            for n in plan.prefill_tokens:
                self._add(out, await self._complete(http, random_tokens(self._rng, n), out))
                self._progress(f"prefill {n} tokens")
            for prefix_len, extra in plan.cached_pairs:
                prefix = random_tokens(self._rng, prefix_len)
                self._add(out, await self._complete(http, prefix))
                self._progress(f"prefill {prefix_len} tokens")
                full = prefix + random_tokens(self._rng, extra)
                self._add(out, await self._complete(http, full))
                self._progress(f"prefill {extra} after {prefix_len} cached")
            for n in plan.local_prefill_tokens:
                await self._complete(http, random_tokens(self._rng, n), out, local=True)
                self._progress(f"local prefill {n} tokens")
        for _ in range(plan.repeats):
            for length in plan.decode_prompt_tokens:
                for b in plan.decode_batch_sizes:
                    out.batches.append(await self._decode_batch(http, b, length, out))
        return out

    @staticmethod
    def _add(out: Measurements, sample: PrefillSample | None) -> None:
        if sample is None:
            out.skipped_local_prefills += 1
        else:
            out.prefill.append(sample)

    async def _check(self, http: httpx.AsyncClient) -> None:
        ready = await http.get("/ready")
        if ready.status_code != 200:
            raise ProfileError(
                f"{self.url}/ready answered HTTP {ready.status_code}: the cluster is not ready "
                "(wait for `pdserve up` to finish, or check the engines)"
            )
        if self.model is None:
            models = await http.get("/v1/models")
            _raise_for_status(models, "/v1/models")
            data = models.json().get("data") or []
            if not data:
                raise ProfileError(f"{self.url}/v1/models lists no model; pass --model")
            self.model = str(data[0]["id"])

    async def _complete(
        self,
        http: httpx.AsyncClient,
        prompt: list[int],
        out: Measurements | None = None,
        *,
        local: bool = False,
        beside: tuple[int, int] = (0, 0),
    ) -> PrefillSample | None:
        """One prefill (max_tokens 1); with `out`, its serving stages are recorded too, and
        with `local` (a prompt under the cold threshold) its local prefill instead, sent while
        `beside` = (streams, context tokens) decode: ProfileError when the router prefilled it
        remotely after all."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0}
        # A local prefill beside decoding streams is what the ITL guard would refuse: it is
        # the sample being measured, so the guard is off for it (router.allow_policy_override).
        headers = {ITL_GUARD_HEADER: "off"} if local else None
        resp = await http.post("/v1/completions", json=body, headers=headers)
        if local and resp.status_code == 400 and ITL_GUARD_HEADER in resp.text:
            raise ProfileError(
                "measuring local prefills beside decode streams needs the ITL guard off for "
                f"those requests ({ITL_GUARD_HEADER}: off): set router.allow_policy_override: "
                "true (or router.routing.itl_slo_s: null) while profiling"
            )
        _raise_for_status(resp, "/v1/completions")
        data = resp.json()
        if local and out is not None:
            sample = local_prefill_sample(resp.headers, data, len(prompt), beside=beside)
            if sample is None:
                raise ProfileError(
                    f"a fresh {len(prompt)}-token prompt, under the config's "
                    "local_prefill_max_cold_tokens, was not prefilled on the decode engine: "
                    "does --config match the running cluster?"
                )
            out.local_prefill.append(sample)
            return None
        if out is not None:
            serving = serving_sample(resp.headers, data, len(prompt))
            if serving is not None:
                out.serving.append(serving)
        return prefill_sample(resp.headers, data, len(prompt))

    async def _local_beside(
        self,
        http: httpx.AsyncClient,
        out: Measurements,
        decoding: asyncio.Event,
        streams: asyncio.Future[Any],
        beside: tuple[int, int],
    ) -> None:
        """Once a stream of the batch has its second chunk (the batch is decoding, past the
        burst of its first chunks; the router sends a chunk per stream batch interval, a
        quarter or so of the tokens), one local prefill of the plan's middle local length
        joins it; nothing when the streams end first. Its step is one of the batch's 64, about
        a millisecond longer: the batch's TPOT moves by about 1 %."""
        started = asyncio.ensure_future(decoding.wait())
        await asyncio.wait({started, streams}, return_when=asyncio.FIRST_COMPLETED)
        if not decoding.is_set():
            started.cancel()
            return
        lengths = self.plan.local_prefill_tokens
        n = lengths[len(lengths) // 2]
        await self._complete(http, random_tokens(self._rng, n), out, local=True, beside=beside)
        self._progress(f"local prefill {n} beside B={beside[0]}")

    async def _decode_batch(
        self, http: httpx.AsyncClient, b: int, length: int, out: Measurements | None = None
    ) -> DecodeBatch:
        prefix, prompts = decode_batch_prompts(self._rng, b, length)
        await self._complete(http, prefix)  # cache the shared prefix: short prefills below
        self._progress(f"decode B={b} L={length}")
        decoding = asyncio.Event()
        gathered = asyncio.gather(*(self._stream(http, p, b, length, decoding) for p in prompts))
        if self.plan.local_prefill_tokens and out is not None:
            context = b * (length + self.plan.decode_output_tokens // 4)
            await self._local_beside(http, out, decoding, gathered, (b, context))
        streams = await gathered
        if all(s.client_tpot_s is None for s in streams):
            raise ProfileError(
                f"decode batch B={b} L={length}: no stream returned two or more tokens "
                f"(asked for {self.plan.decode_output_tokens} with ignore_eos)"
            )
        return DecodeBatch(
            batch_size=b,
            prompt_tokens=length,
            output_tokens=self.plan.decode_output_tokens,
            client_tpot_s=tuple(s.client_tpot_s for s in streams if s.client_tpot_s is not None),
            router_tpot_s=tuple(s.router_tpot_s for s in streams if s.router_tpot_s is not None),
        )

    async def _stream(
        self,
        http: httpx.AsyncClient,
        prompt: list[int],
        b: int,
        length: int,
        decoding: asyncio.Event | None = None,
    ) -> _Stream:
        """One decode stream; sets `decoding` at its second chunk."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": self.plan.decode_output_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        first = last = None
        chunks, tokens, router_decode = 0, None, None
        async with http.stream("POST", "/v1/completions", json=body) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                _raise_for_status(resp, "/v1/completions (stream)")
            async for event in aiter_events(resp):
                chunk = read_chunk(event)
                if chunk.error is not None:
                    raise ProfileError(f"decode stream failed: {chunk.error}")
                if chunk.has_choice:
                    last = time.perf_counter()
                    first = first if first is not None else last
                    chunks += 1
                    if decoding is not None and chunks >= 2:
                        decoding.set()
                if chunk.usage is not None:
                    tokens = chunk.usage.completion_tokens
                    timing = json.loads(event.data).get("pdserve_timing") or {}
                    router_decode = timing.get("decode")
                if chunk.done:
                    break
        self._progress(f"decode B={b} L={length}")
        n = tokens if tokens else chunks
        if first is None or last is None:
            return _Stream(None, None)
        router = router_decode / (n - 1) if router_decode is not None and n > 1 else None
        return _Stream(tpot_s(first, last, n), router)


def _raise_for_status(resp: httpx.Response, what: str) -> None:
    if resp.status_code < 400:
        return
    try:
        message = error_message(resp.json()) or resp.text[:300]
    except (json.JSONDecodeError, UnicodeDecodeError):
        message = resp.text[:300]
    raise ProfileError(f"HTTP {resp.status_code} from {what}: {message}")
