"""Deadlines: the pure budgets, and the real request path missing each one (a fake
Dispatcher that goes silent like a frozen engine)."""

from __future__ import annotations

import json
import math
import time

import httpx
import pytest

from pdserve.config import DeadlineConfig, PdserveConfig, RouterConfig
from pdserve.messages import SamplingOptions
from pdserve.router.app import build_app
from pdserve.router.deadlines import RequestDeadlines
from pdserve.router.errors import OpenAIError
from pdserve.router.metrics import RouterMetrics
from pdserve.router.observe import RouterObserver
from pdserve.router.orchestrate import Orchestrator
from pdserve.router.prepare import PreparedRequest, RequestPreparer
from pdserve.router.status import ClusterStatus
from tests.unit.router.fakes import FakeDispatcher, WordTokenizer, placer

LIMITS = DeadlineConfig(
    prefill_seconds=10, first_token_seconds=30, stream_idle_seconds=5, request_seconds=100
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("elapsed_s", "step", "expected"),
    [
        (0, "prefill", (10, "prefill_timeout")),
        (25, "prefill", (5, "first_token_timeout")),  # first-token deadline is nearer
        (0, "first_token", (30, "first_token_timeout")),
        (40, "first_token", (0, "first_token_timeout")),  # already missed: no time left
        (50, "idle", (5, "stream_idle_timeout")),
        (97, "idle", (3, "request_timeout")),
        (50, "unary", (50, "request_timeout")),  # non-streaming: no idle limit
    ],
)
def test_budget_is_the_tightest_deadline(
    elapsed_s: float, step: str, expected: tuple[float, str]
) -> None:
    clock = Clock()
    deadlines = RequestDeadlines(LIMITS, arrival_s=clock.now, clock=clock)
    clock.now += elapsed_s
    budget = {
        "prefill": deadlines.prefill,
        "first_token": deadlines.first_token,
        "idle": lambda: deadlines.next_chunk(streaming=True),
        "unary": lambda: deadlines.next_chunk(streaming=False),
    }[step]()
    assert (budget.seconds, budget.code) == expected
    assert "router.deadlines" in budget.message()


FAST = {"prefill_seconds": 0.2, "first_token_seconds": 0.5, "stream_idle_seconds": 0.2,
        "request_seconds": 5.0}  # fmt: skip


def prepared(stream: bool, num_tokens: int = 640) -> PreparedRequest:
    return PreparedRequest(
        request_id="slow",
        engine_request_id="slow-1",
        prompt_token_ids=list(range(num_tokens)),
        sampling=SamplingOptions(max_tokens=3),
        priority=0,
        stream=stream,
    )


def rig(
    d: FakeDispatcher, local: bool = False, fallback: str = "fail", decodes: int = 1
) -> tuple[Orchestrator, RouterObserver]:
    the_placer = placer(
        local_prefill_max_cold_tokens=1000 if local else 0,
        decode_replicas=tuple(f"d{i}" for i in range(decodes)),
    )
    config = RouterConfig.model_validate({"deadlines": FAST, "fallback": {"prefill": fallback}})
    observer = RouterObserver(RouterMetrics(), the_placer)
    return Orchestrator(config, d, the_placer), observer


async def test_a_hung_prefill_is_a_504_and_its_call_is_cancelled() -> None:
    d = FakeDispatcher(prefill_hangs=True)
    orchestrator, observer = rig(d)
    obs = observer.start("completion", "slow", "slow-1", time.monotonic())
    with pytest.raises(OpenAIError) as err:
        await orchestrator.run(prepared(stream=False), obs, None)
    assert (err.value.status, err.value.code) == (504, "prefill_timeout")
    assert d.aborted == ["slow-1-p"] and d.decodes == []
    assert obs.failure_point == "prefill"


@pytest.mark.parametrize("stream", [False, True])
async def test_no_first_token_in_time_is_a_504_and_decode_is_aborted(stream: bool) -> None:
    d = FakeDispatcher(decode_hang_at=0)
    # Another decode replica is there, but a missed first-token deadline is not retried.
    orchestrator, observer = rig(d, local=True, decodes=2)
    obs = observer.start("completion", "slow", "slow-1", time.monotonic())
    gen = await orchestrator.run(prepared(stream, num_tokens=20), obs, None)
    with pytest.raises(OpenAIError) as err:
        await anext(gen.chunks)
    assert (err.value.status, err.value.code) == (504, "first_token_timeout")
    assert d.aborted == ["slow-1-d"]


async def test_a_silent_stream_ends_after_the_idle_deadline_but_a_unary_one_does_not() -> None:
    d = FakeDispatcher(decode_hang_at=1)
    orchestrator, observer = rig(d, local=True)
    obs = observer.start("completion", "slow", "slow-1", time.monotonic())
    gen = await orchestrator.run(prepared(stream=True, num_tokens=20), obs, None)
    await anext(gen.chunks)
    t0 = time.monotonic()
    with pytest.raises(OpenAIError) as err:
        await anext(gen.chunks)
    assert (err.value.status, err.value.code) == (504, "stream_idle_timeout")
    assert 0.15 < time.monotonic() - t0 < 1.0
    assert d.aborted == ["slow-1-d"] and obs.failure_point == "decode_after_first_token"

    # Non-streaming: tokens come at the end, so gaps longer than the idle limit are fine.
    d2 = FakeDispatcher(chunk_delay_s=0.25)
    orchestrator2, observer2 = rig(d2, local=True)
    obs2 = observer2.start("completion", "ok", "ok-1", time.monotonic())
    gen2 = await orchestrator2.run(prepared(stream=False, num_tokens=20), obs2, None)
    chunks = [c async for c in gen2.chunks]
    assert len(chunks) == 3 and d2.aborted == []


def client(d: FakeDispatcher, sse_keepalive_s: float = 15.0) -> httpx.AsyncClient:
    config = PdserveConfig.model_validate(
        {"router": {"deadlines": FAST, "fallback": {"prefill": "fail"}}}
    )
    the_placer = placer(local_prefill_max_cold_tokens=1000)
    app = build_app(
        RequestPreparer(config, WordTokenizer()),
        Orchestrator(config.router, d, the_placer),
        RouterObserver(RouterMetrics(), the_placer),
        ClusterStatus(the_placer, d),
        sse_keepalive_s=sse_keepalive_s,
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://router")


BODY = {"model": "pdserve-demo", "prompt": "frozen engine", "max_tokens": 3}


async def test_http_504_before_the_first_token_and_an_error_event_after_it() -> None:
    async with client(FakeDispatcher(decode_hang_at=0)) as c:
        resp = await c.post("/v1/completions", json={**BODY, "stream": True})
    assert resp.status_code == 504
    assert resp.json()["error"]["code"] == "first_token_timeout"

    async with client(FakeDispatcher(decode_hang_at=1)) as c:
        resp = await c.post("/v1/completions", json={**BODY, "stream": True})
    assert resp.status_code == 200
    events = [ln[6:] for ln in resp.text.splitlines() if ln.startswith("data: ")]
    assert "[DONE]" not in events
    assert json.loads(events[0])["choices"][0]["text"] == " a"
    assert json.loads(events[-1])["error"]["code"] == "stream_idle_timeout"


async def test_sse_keepalive_comments_flow_while_decode_is_slow() -> None:
    async with client(FakeDispatcher(chunk_delay_s=0.15), sse_keepalive_s=0.05) as c:
        resp = await c.post("/v1/completions", json={**BODY, "stream": True})
    assert resp.status_code == 200 and ": ping" in resp.text
    assert resp.text.rstrip().endswith("data: [DONE]")
    assert math.isfinite(len(resp.text))


async def test_a_hung_prefill_falls_back_to_a_local_prefill_within_the_deadline() -> None:
    d = FakeDispatcher(prefill_hangs=True)
    orchestrator, observer = rig(d, fallback="retry_then_local")
    obs = observer.start("completion", "slow", "slow-1", time.monotonic())
    gen = await orchestrator.run(prepared(stream=False), obs, None)
    chunks = [c async for c in gen.chunks]
    assert d.aborted == ["slow-1-p"], "the hung prefill is cancelled"
    assert d.decodes[0].handoff is None and len(chunks) == 3
    assert obs.fallbacks == ["prefill failed on p0 (timeout): prefilled on decode d0"]
