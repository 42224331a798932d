"""pdserve.engine.warmup against a stand-in AsyncLLM (records what it was sent): the prompt,
then the burst's prompts all in flight at once, one token each; nothing when the warm-up is
off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from pdserve.config import PdserveConfig
from pdserve.engine.warmup import warm_up


class RecordingEngine:
    """Answers each generate() with one output 50 ms after it was called."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[int], int]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def generate(self, prompt: Any, params: Any, request_id: str) -> AsyncIterator[str]:
        self.sent.append((request_id, list(prompt["prompt_token_ids"]), params.max_tokens))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.05)
        self.in_flight -= 1
        yield "one token"


def test_prompt_then_the_burst_at_once() -> None:
    eng = PdserveConfig().prefill.engine  # CPU defaults: budget 4096, 4 burst prompts
    engine = RecordingEngine()
    times = asyncio.run(warm_up(engine, eng, "cpu", 4096, "t"))
    assert [len(ids) for _, ids, _ in engine.sent] == [4095] + [1536] * 4
    assert all(max_tokens == 1 for *_, max_tokens in engine.sent)
    assert engine.most_in_flight == 4  # the burst's prompts were all in the engine together
    firsts = [ids[0] for _, ids, _ in engine.sent]
    assert len(set(firsts)) == 5  # no two share a prefix-cache block
    assert len({rid for rid, _, _ in engine.sent}) == 5
    assert times.prompt_tokens == 4095 and times.burst_tokens == (1536,) * 4
    assert times.prompt_s >= 0.05 and 0.05 <= times.burst_s < 0.2  # at once, not one by one


def test_no_burst_when_off_and_nothing_when_the_warmup_is_off() -> None:
    eng = PdserveConfig().prefill.engine
    engine = RecordingEngine()
    asyncio.run(
        warm_up(engine, eng.model_copy(update={"warmup_burst_prompts": 0}), "cpu", 4096, "t")
    )
    assert [len(ids) for _, ids, _ in engine.sent] == [4095]
    engine = RecordingEngine()
    times = asyncio.run(warm_up(engine, eng, "cuda", 4096, "t"))  # GPU default: no warm-up
    assert engine.sent == [] and times.prompt_tokens == 0 and times.burst_tokens == ()
