"""The warm-up before each phase: every prompt length of the workload, each length's requests
sent at once (the runner against an in-process mock transport; no network)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from rich.progress import Progress

from pdserve.bench.client import BenchClient
from pdserve.bench.config import BenchConfig
from pdserve.bench.runner import Runner

SSE = {"content-type": "text/event-stream"}
USAGE = {"prompt_tokens": 0, "completion_tokens": 1}


def _config(**update: object) -> BenchConfig:
    base = {
        "workload": "mixed",
        "model": "m",
        "token_ids": True,  # exact prompt lengths, and no calibration requests
        "num_requests": 4,
        "concurrency": 1,
        "short_tokens": 20,
        "long_tokens": 300,
        "output_tokens": 2,
        "warmup": 2,
    }
    return BenchConfig.model_validate(base | update)


def _sent_lengths(cfg: BenchConfig) -> list[tuple[int, int]]:
    """(prompt length, other requests in flight when it arrived) of every request the runner
    sends, in order; each answer waits until no request arrived for 20 ms, so requests sent
    together are all in flight at once."""
    seen: list[tuple[int, int]] = []
    in_flight = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight
        body = json.loads(request.content)
        seen.append((len(body["prompt"]), in_flight))
        in_flight += 1
        count = len(seen)
        while True:  # answer once nothing else arrived for 20 ms
            await asyncio.sleep(0.02)
            if len(seen) == count:
                break
            count = len(seen)
        in_flight -= 1
        chunk = {"choices": [{"text": "a", "finish_reason": "length"}]}
        done = {"choices": [], "usage": USAGE | {"prompt_tokens": len(body["prompt"])}}
        payload = "".join(f"data: {json.dumps(p)}\n\n" for p in (chunk, done))
        return httpx.Response(200, content=(payload + "data: [DONE]\n\n").encode(), headers=SSE)

    async def go() -> None:
        client = BenchClient("http://bench.test", 1, 5.0, transport=httpx.MockTransport(handler))
        try:
            with Progress(disable=True) as progress:
                runner = Runner(cfg, client, progress, lambda _: None, time.perf_counter)
                out = await runner.run()
            assert not out.interrupted
        finally:
            await client.close()

    asyncio.run(go())
    return seen


def test_mixed_warms_up_short_then_long_prompts_each_length_at_once() -> None:
    cfg = _config()
    assert cfg.warmup_prompt_tokens == (20, 300) and cfg.num_warmup_requests == 4
    sent = _sent_lengths(cfg)
    warm, measured = sent[:4], sent[4:]
    assert [n for n, _ in warm] == [20, 20, 300, 300]
    assert warm[1][1] == 1 and warm[3][1] == 1  # the second of each length: the first in flight
    assert warm[2][1] == 0  # the long ones start after the short ones answered
    assert len(measured) == cfg.num_requests


@pytest.mark.parametrize(
    ("update", "lengths"),
    [
        ({"long_fraction": 0.0}, (20,)),  # no long requests: nothing long to warm
        ({"workload": "synthetic"}, (20,)),
        ({"warmup": 0}, (20, 300)),
    ],
)
def test_warmup_lengths(update: dict[str, object], lengths: tuple[int, ...]) -> None:
    cfg = _config(**update)
    assert cfg.warmup_prompt_tokens == lengths
    assert cfg.num_warmup_requests == cfg.warmup * len(lengths)


def test_no_warmup_sends_only_the_workload() -> None:
    cfg = _config(warmup=0)
    assert len(_sent_lengths(cfg)) == cfg.num_requests
