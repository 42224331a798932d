"""Shared data for the `pdserve profile` tests (test_profiling, test_profile_yaml,
test_profile_cli, test_profile_pool): a fitted cost model, the response headers and usage body
a pdserve router answers a profiling request with, and an in-process mock router whose prefill
times follow TRUE (httpx.MockTransport, no network) with a runner for the command against it."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from pdserve.cli import app
from pdserve.profiling import cli as profile_cli
from pdserve.profiling import samples as S
from pdserve.router.policy.cost_model import CostModel

REPO = pathlib.Path(__file__).resolve().parents[2]
FIT = CostModel(fixed_overhead_s=0.0125, per_token_s=3.5e-05, per_token_sq_s=2e-09)
"""A fitted cost model, as `pdserve profile` writes it."""


def headers(timing: dict[str, float], decision: dict[str, Any] | None) -> dict[str, str]:
    """The x-pdserve-timing header (and x-pdserve-decision unless `decision` is None)."""
    out = {S.TIMING_HEADER: json.dumps(timing)}
    return out if decision is None else {**out, S.DECISION_HEADER: json.dumps(decision)}


def usage(prompt: int, cached: int | None) -> dict[str, Any]:
    """A response body's usage (no prompt_tokens_details when `cached` is None)."""
    details = {} if cached is None else {"prompt_tokens_details": {"cached_tokens": cached}}
    return {"usage": {"prompt_tokens": prompt, "completion_tokens": 1, **details}}


TRUE = CostModel(fixed_overhead_s=0.015, per_token_s=4e-05, per_token_sq_s=1e-09)
LOCAL_FIXED_S = 0.006
"""The mock decode engine's fixed cost of a prompt it prefills itself (TRUE's is 0.015)."""
SERVING = {"router_queue": 0.002, "prefill_hops": 0.008, "decode_hops": 0.008}


def mock_router(
    status: int = 200, ready: int = 200, busy_host: bool = False, cold_tokens: int = 0
) -> httpx.MockTransport:
    """`busy_host`: every other prefill takes 4x TRUE's time, the others a quarter (a host
    whose other work comes and goes while it is profiled). `cold_tokens`: the router's cold
    local-prefill threshold: a shorter fresh prompt is prefilled on the decode engine, its
    first step LOCAL_FIXED_S plus TRUE's token terms (the mock's streams decode in no time,
    alone or beside a local prefill); a remote prefill reports every stage."""
    cache: set[tuple[int, ...]] = set()
    served = [0]

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/ready":
            return httpx.Response(ready, json={})
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        body = json.loads(request.content)
        if status != 200:
            return httpx.Response(status, json={"error": {"message": "engine exploded"}})
        ids = body["prompt"]
        cached = max((n for n in (1024, 2048) if tuple(ids[:n]) in cache), default=0)
        cache.update(tuple(ids[:n]) for n in (1024, 2048) if len(ids) >= n)
        reply = usage(len(ids), cached)
        if body.get("stream"):
            chunk = {"choices": [{"text": "x"}]}
            reply["usage"]["completion_tokens"] = body["max_tokens"]
            events = [chunk] * body["max_tokens"] + [reply]
            text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            sse_headers = {**headers({}, None), "content-type": "text/event-stream"}
            return httpx.Response(200, text=text, headers=sse_headers)
        if len(ids) - cached < cold_tokens:
            first = LOCAL_FIXED_S + TRUE.est_prefill_s(len(ids), 0) - TRUE.fixed_overhead_s
            timing = {"router_queue": 0.002, "decode_first_token": first, "decode_hops": 0.004}
            return httpx.Response(200, json=reply, headers=headers(timing, {"cached_tokens": 0}))
        timing = {
            **SERVING,
            "prefill": TRUE.est_prefill_s(len(ids) - cached, cached),
            "kv_transfer": 0.01 + 1e-6 * len(ids),
            "decode_first_token": 0.003,
        }
        if busy_host:
            served[0] += 1
            timing["prefill"] *= 4.0 if served[0] % 2 else 0.25
        return httpx.Response(200, json=reply, headers=headers(timing, {"cached_tokens": 0}))

    return httpx.MockTransport(handle)


def invoke_profile(
    monkeypatch: pytest.MonkeyPatch, transport: httpx.MockTransport, *args: str
) -> Any:
    """Run `pdserve profile --url http://r.test ARGS` against `transport` (CliRunner)."""
    real = profile_cli.Profiler
    monkeypatch.setattr(profile_cli, "Profiler", lambda *a, **k: real(*a, **k, transport=transport))
    # Wide enough that no path in a message wraps (pytest-xdist's tmp paths are long).
    return CliRunner().invoke(
        app, ["profile", "--url", "http://r.test", *args], env={"COLUMNS": "1000"}
    )
