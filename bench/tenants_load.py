"""The load of `pdserve bench-tenants`, sent with the official `openai` client (one `AsyncOpenAI`
per tenant, its key from the key file, the SDK's own retries off so every 429 is seen).

`TenantClient.send` streams one completion of a token-id prompt and, on a 429, waits the
Retry-After (capped) and resends it until it is served: nothing is dropped, every attempt is
recorded with OpenAI's rate-limit headers. `closed_loop` and `open_loop` drive a tenant's
clients for a phase; both let in-flight requests finish when the phase ends.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import openai

from pdserve.bench.prompts import TOKEN_ID_HIGH, TOKEN_ID_LOW
from pdserve.router.headers import FAIR_SHARE_HEADER

RATE_HEADERS = tuple(
    f"x-ratelimit-{what}-{kind}"
    for kind in ("requests", "tokens")
    for what in ("limit", "remaining", "reset")
)


@dataclass(frozen=True, slots=True)
class Attempt:
    status: int
    """HTTP status; 0: no answer (connection error, timeout)."""
    rate_headers: dict[str, str]
    message: str = ""
    retry_after_s: float | None = None


@dataclass
class Outcome:
    """One request, over all its attempts."""

    tenant: str
    phase: str
    start_s: float
    ttft_s: float | None = None
    """First attempt's start to the first token (429 waits included); None: not served."""
    attempts: list[Attempt] = field(default_factory=list)
    error: str | None = None
    refused: bool = False
    """Gave up after its attempts were all answered 429 (a clean refusal, not a loss)."""

    @property
    def served(self) -> bool:
        return self.ttft_s is not None and self.error is None


class TenantClient:
    def __init__(
        self,
        url: str,
        tenant: str,
        key: str,
        model: str,
        *,
        max_tokens: int,
        timeout_s: float,
        max_retry_wait_s: float,
        seed: int,
        max_attempts: int | None = None,
        stream: bool = True,
        clock: Callable[[], float] = time.perf_counter,
    ):
        """`stream`: stream the answer and time its first token (False: one JSON answer,
        timed to its end; what a batch client does)."""
        self._stream = stream
        self.tenant = tenant
        self._client = openai.AsyncOpenAI(
            base_url=url.rstrip("/") + "/v1", api_key=key, max_retries=0, timeout=timeout_s
        )
        self._model = model
        self._max_tokens = max_tokens
        self._max_wait_s = max_retry_wait_s
        self._max_attempts = max_attempts
        """Attempts per request before giving up on 429s (None: until served)."""
        self._rng = random.Random(f"{tenant}:{seed}")
        self._clock = clock

    async def close(self) -> None:
        await self._client.close()

    def prompt(self, num_tokens: int) -> list[int]:
        """A prompt no other request shares a cache block with."""
        return [self._rng.randrange(TOKEN_ID_LOW, TOKEN_ID_HIGH) for _ in range(num_tokens)]

    async def send(
        self,
        phase: str,
        num_tokens: int,
        fair_share: bool,
        t0: float,
        max_tokens: int | None = None,
    ) -> Outcome:
        prompt = self.prompt(num_tokens)
        start = self._clock()
        out = Outcome(self.tenant, phase, start - t0)
        headers = {FAIR_SHARE_HEADER: "on" if fair_share else "off"}
        while True:
            try:
                raw = await self._client.completions.with_raw_response.create(
                    model=self._model,
                    prompt=prompt,
                    max_tokens=max_tokens or self._max_tokens,
                    stream=self._stream,
                    extra_headers=headers,
                )
                first = None
                answer = raw.parse()
                if isinstance(answer, openai.AsyncStream):
                    async for chunk in answer:
                        if first is None and chunk.choices and chunk.choices[0].text:
                            first = self._clock()
                elif answer.choices and answer.choices[0].text:
                    first = self._clock()
                out.attempts.append(Attempt(raw.status_code, _rate(raw.headers)))
                out.ttft_s = None if first is None else first - start
                if first is None:
                    out.error = "the stream ended without a token"
                return out
            except openai.RateLimitError as exc:
                h = exc.response.headers
                wait = float(h.get("retry-after", "1"))
                out.attempts.append(Attempt(429, _rate(h), _message(exc), wait))
                if self._max_attempts is not None and len(out.attempts) >= self._max_attempts:
                    out.refused = True
                    return out
                await asyncio.sleep(min(wait, self._max_wait_s))
            except openai.APIStatusError as exc:
                out.attempts.append(Attempt(exc.status_code, _rate(exc.response.headers),
                                            _message(exc)))  # fmt: skip
                out.error = f"HTTP {exc.status_code}: {_message(exc)}"
                return out
            except openai.APIError as exc:
                out.attempts.append(Attempt(0, {}, str(exc)))
                out.error = f"{type(exc).__name__}: {exc}"
                return out


def _rate(headers: object) -> dict[str, str]:
    get = getattr(headers, "get", None)
    if get is None:
        return {}
    return {name: str(get(name)) for name in RATE_HEADERS if get(name) is not None}


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message", ""))
    return str(exc)


async def closed_loop(
    client: TenantClient,
    clients: int,
    phase: str,
    num_tokens: int,
    fair_share: bool,
    stop: asyncio.Event,
    t0: float,
    done: list[Outcome],
    max_tokens: int | None = None,
) -> None:
    """`clients` loops, each sending one request after another until `stop` is set (the
    request in flight then finishes)."""

    async def one() -> None:
        while not stop.is_set():
            done.append(await client.send(phase, num_tokens, fair_share, t0, max_tokens))

    await asyncio.gather(*(one() for _ in range(clients)))


async def open_loop(
    client: TenantClient,
    rate_per_s: float,
    duration_s: float,
    phase: str,
    num_tokens: int,
    fair_share: bool,
    t0: float,
    done: list[Outcome],
    stop: asyncio.Event | None = None,
) -> None:
    """One request every 1/rate seconds for `duration_s` (or until `stop` is set), whatever
    the answers; returns when every one of them is over."""
    tasks: list[asyncio.Task[None]] = []
    loop_start = time.perf_counter()

    async def one() -> None:
        done.append(await client.send(phase, num_tokens, fair_share, t0))

    k = 0
    while (due := k / rate_per_s) < duration_s and not (stop is not None and stop.is_set()):
        await asyncio.sleep(max(0.0, loop_start + due - time.perf_counter()))
        tasks.append(asyncio.create_task(one()))
        k += 1
    await asyncio.gather(*tasks)


@dataclass(frozen=True)
class LoadSpec:
    """One tenant's load for one phase, run in a process of its own (`run_load`) so that no
    tenant's client shares an event loop with another's."""

    url: str
    tenant: str
    key: str
    model: str
    phase: str
    num_tokens: int
    max_tokens: int
    fair_share: bool
    duration_s: float
    start_after_s: float = 0.0
    rate_per_s: float | None = None
    """Open loop at this rate; None: `clients` closed loops."""
    clients: int = 1
    stream: bool = True
    max_attempts: int | None = None
    max_retry_wait_s: float = 5.0
    timeout_s: float = 120.0
    seed: int = 0


def run_load(spec: LoadSpec) -> list[Outcome]:
    """Run `spec` to its end (in-flight requests finish) and return every request's outcome."""
    return asyncio.run(_run_load(spec))


async def _run_load(spec: LoadSpec) -> list[Outcome]:
    client = TenantClient(
        spec.url, spec.tenant, spec.key, spec.model,
        max_tokens=spec.max_tokens, timeout_s=spec.timeout_s,
        max_retry_wait_s=spec.max_retry_wait_s, seed=spec.seed,
        max_attempts=spec.max_attempts, stream=spec.stream,
    )  # fmt: skip
    done: list[Outcome] = []
    try:
        await asyncio.sleep(spec.start_after_s)
        t0 = time.perf_counter()
        if spec.rate_per_s is not None:
            await open_loop(client, spec.rate_per_s, spec.duration_s, spec.phase,
                            spec.num_tokens, spec.fair_share, t0, done)  # fmt: skip
        else:
            stop = asyncio.Event()
            loops = asyncio.create_task(closed_loop(
                client, spec.clients, spec.phase, spec.num_tokens, spec.fair_share, stop, t0,
                done, spec.max_tokens,
            ))  # fmt: skip
            await asyncio.sleep(spec.duration_s)
            stop.set()
            await loops
    finally:
        await client.close()
    return done
