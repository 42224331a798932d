"""Requests under fault (HTTP adapter): one request judged as an `Outcome`, and a steady
closed-loop stream load.

`send_one` never raises for a failed request: a refusal, an error event, a cut stream, a
timeout or a transport error all become an `Outcome`. Cancelling it (the client leaving)
propagates. `SteadyLoad` keeps `clients` streams going at a steady `rate_per_s` in all: each
client sends its next request when the last one ended, but no sooner than `clients /
rate_per_s` seconds after the last one started (and one second later after a failure, as a
polite client would).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from pdserve.bench.faults import Outcome
from pdserve.bench.sse import DONE, aiter_events
from pdserve.bench.words import WORDS
from pdserve.router.headers import DECISION_HEADER

Clock = Callable[[], float]


def prompt_of_words(num_words: int, salt: int) -> str:
    """A prompt no other request shares a prefix with (the salt leads it)."""
    return f"request {salt}: " + " ".join(
        WORDS[(salt * 7919 + i * 31) % len(WORDS)] for i in range(num_words)
    )


def completion_body(model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """A streaming completion of exactly `max_tokens` tokens."""
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }


def _error_code(payload: str) -> str | None:
    """The `code` of an OpenAI error body or error event (None when it is not one)."""
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        error = json.loads(payload).get("error")
        if isinstance(error, dict):
            return str(error.get("code") or error.get("type") or "error")
    return None


def _fallbacks(headers: httpx.Headers) -> int:
    with contextlib.suppress(ValueError, AttributeError):
        return len(json.loads(headers.get(DECISION_HEADER, "{}")).get("fallbacks", []))
    return 0


async def send_one(
    http: httpx.AsyncClient,
    body: dict[str, Any],
    headers: dict[str, str],
    timeout_s: float,
    clock: Clock = time.monotonic,
    on_answer: Callable[[], None] | None = None,
) -> Outcome:
    """Stream one completion and judge it. `on_answer` is called when the response headers
    arrive (the router sends them with the first token)."""
    started = clock()
    status: int | None = None
    completed, code, fallbacks = False, None, 0
    try:
        async with (
            asyncio.timeout(timeout_s),
            http.stream("POST", "/v1/completions", json=body, headers=headers) as resp,
        ):
            status = resp.status_code
            fallbacks = _fallbacks(resp.headers)
            if on_answer is not None:
                on_answer()
            if status >= 400:
                code = _error_code((await resp.aread()).decode(errors="replace"))
            else:
                async for event in aiter_events(resp):
                    if event.data == DONE:
                        completed = True
                        break
                    code = _error_code(event.data)
                    if code is not None:
                        break
    except (TimeoutError, httpx.HTTPError):
        completed = False
    return Outcome(started, clock(), status, completed, code, fallbacks)


class SteadyLoad:
    """`clients` paced streams of fresh prompts; `stop()` returns every outcome."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        clients: int,
        rate_per_s: float,
        make_body: Callable[[int], dict[str, Any]],
        headers: dict[str, str],
        request_timeout_s: float,
        clock: Clock = time.monotonic,
    ):
        self._http = http
        self._clients = clients
        self._interval_s = clients / rate_per_s
        self._make_body = make_body
        self._headers = headers
        self._timeout_s = request_timeout_s
        self._clock = clock
        self._stopping = asyncio.Event()
        self._outcomes: list[Outcome] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._sent = 0

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._client()) for _ in range(self._clients)]

    @property
    def outcomes(self) -> list[Outcome]:
        """Outcomes so far (requests still in flight are not in it)."""
        return list(self._outcomes)

    async def stop(self) -> list[Outcome]:
        """Let each client finish its request in flight (bounded by the request timeout)."""
        self._stopping.set()
        await asyncio.gather(*self._tasks)
        return list(self._outcomes)

    async def _client(self) -> None:
        while not self._stopping.is_set():
            self._sent += 1
            body = self._make_body(self._sent)
            outcome = await send_one(self._http, body, self._headers, self._timeout_s, self._clock)
            self._outcomes.append(outcome)
            pause_s = self._interval_s - (outcome.ended_s - outcome.started_s)
            if not outcome.completed:
                pause_s = max(pause_s, 1.0)
            if pause_s > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), pause_s)
