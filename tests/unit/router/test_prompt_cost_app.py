"""Prompt cost and cache breaks as a client sees them: the x-pdserve-prompt-cost header, the
usage field (plain and streamed), pdserve_prompt_tokens_total by part and
pdserve_cache_breaks_total, and the off switch (real preparer, orchestrator and observer over
a scripted Dispatcher)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from pdserve.config import PdserveConfig
from pdserve.router.app import build_app
from pdserve.router.context.breaks import ConversationTracker
from pdserve.router.metrics import RouterMetrics
from pdserve.router.observe import RouterObserver
from pdserve.router.orchestrate import Orchestrator
from pdserve.router.prepare import RequestPreparer
from pdserve.router.status import ClusterStatus
from tests.unit.router.fakes import FakeDispatcher, StepClock, WordTokenizer, placer

MODEL = "pdserve-demo"
SYSTEM = " ".join(f"s{i}" for i in range(200))  # a long system prompt: remote prefill
TASK = "count the apples"


class Client:
    def __init__(
        self, enabled: bool = True, num_cached_prefill: int = 150, max_bytes: int = 1 << 20
    ) -> None:
        cost = {"enabled": enabled, "conversation_state_max_bytes": max_bytes}
        config = PdserveConfig.model_validate({"router": {"prompt_cost": cost}})
        the_placer = placer(local_prefill_max_cold_tokens=64)
        self.metrics = RouterMetrics()
        dispatcher = FakeDispatcher(num_cached_prefill=num_cached_prefill)
        app = build_app(
            RequestPreparer(config, WordTokenizer(), ConversationTracker(max_bytes)),
            Orchestrator(config.router, dispatcher, the_placer),
            RouterObserver(self.metrics, the_placer, clock=StepClock()),
            ClusterStatus(the_placer, dispatcher),
            report_prompt_cost=enabled,
        )
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
            base_url="http://router",
        )

    def sample(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    async def chat(self, messages: list[dict[str, str]], **extra: Any) -> httpx.Response:
        headers = extra.pop("headers", {})
        body = {"model": MODEL, "messages": messages, "max_tokens": 3, **extra}
        return await self.http.post("/v1/chat/completions", json=body, headers=headers)


def step(n: int, system: str = SYSTEM) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": TASK}]
    for i in range(n):
        msgs += [{"role": "assistant", "content": f"call tool{i}"},
                 {"role": "tool", "content": f"result {i} is fine"}]  # fmt: skip
    return msgs


async def test_header_and_usage_split_the_prompt_by_part() -> None:
    c = Client()
    resp = await c.chat(step(1), user="agent-1")
    assert resp.status_code == 200
    usage = resp.json()["usage"]
    cost = usage["pdserve_prompt_cost"]
    # WordTokenizer: bos (template) + 200 system words + 3 task words + 2 + 4 words.
    parts = cost["parts"]
    assert parts == {
        "system": {"cached": 149, "computed": 51},
        "user": {"cached": 0, "computed": 3},
        "assistant": {"cached": 0, "computed": 2},
        "tool": {"cached": 0, "computed": 4},
        "template": {"cached": 1, "computed": 0},
    }
    assert sum(p["cached"] + p["computed"] for p in parts.values()) == usage["prompt_tokens"]
    assert (
        sum(p["cached"] for p in parts.values())
        == (usage["prompt_tokens_details"]["cached_tokens"])
    )
    assert [m["role"] for m in cost["messages"]] == ["system", "user", "assistant", "tool"]
    assert cost["cache_break"] is None
    header = json.loads(resp.headers["x-pdserve-prompt-cost"])
    assert header == {"parts": parts, "cache_break": None}  # no per-message list in the header
    assert c.sample("pdserve_prompt_tokens_total", part="system", cached="true") == 149
    assert c.sample("pdserve_prompt_tokens_total", part="tool", cached="false") == 4
    assert c.sample("pdserve_cached_prompt_tokens_total") == 150


async def test_a_changing_system_prompt_is_a_break_named_and_counted() -> None:
    c = Client()
    for n in range(3):
        system = f"time {'x' * (n + 1)} {SYSTEM}"  # word lengths are the ids
        resp = await c.chat(step(n, system), headers={"x-pdserve-conversation": "conv-7"})
        brk = json.loads(resp.headers["x-pdserve-prompt-cost"])["cache_break"]
        if n == 0:
            assert brk is None
        else:
            assert brk["message_index"] == 0 and brk["role"] == "system"
            assert brk["part"] == "system" and brk["token_index"] == 2  # after bos and "time"
            assert brk["lost_tokens"] > 200
            assert resp.json()["usage"]["pdserve_prompt_cost"]["cache_break"] == brk
    assert c.sample("pdserve_cache_breaks_total", part="system") == 2


async def test_a_stable_loop_reports_no_break_and_conversations_do_not_mix() -> None:
    c = Client()
    for n in range(4):
        for user in ("a", "b"):
            resp = await c.chat(step(n, f"{user} {SYSTEM}"), user=user)
            assert json.loads(resp.headers["x-pdserve-prompt-cost"])["cache_break"] is None
    assert c.sample("pdserve_cache_breaks_total", part="system") == 0


async def test_conversations_are_matched_by_their_opening_without_a_key() -> None:
    c = Client()
    await c.chat(step(1))
    edited = step(2)
    edited[3]["content"] = "result 0 was trimmed"  # the first tool result rewritten
    resp = await c.chat(edited)
    brk = json.loads(resp.headers["x-pdserve-prompt-cost"])["cache_break"]
    assert (brk["message_index"], brk["role"], brk["part"]) == (3, "tool", "tool")


async def test_streamed_usage_carries_the_prompt_cost() -> None:
    c = Client()
    resp = await c.chat(step(0), stream=True, stream_options={"include_usage": True}, user="s")
    payloads = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
    usage = json.loads(payloads[-2])["usage"]
    parts = usage["pdserve_prompt_cost"]["parts"]
    assert sum(p["cached"] + p["computed"] for p in parts.values()) == usage["prompt_tokens"]
    assert "x-pdserve-prompt-cost" in resp.headers


async def test_off_switch_removes_header_and_field_and_counts_one_part() -> None:
    c = Client(enabled=False)
    resp = await c.chat(step(1), user="x")
    await c.chat(step(2, "changed " + SYSTEM), user="x")
    assert "x-pdserve-prompt-cost" not in resp.headers
    assert "pdserve_prompt_cost" not in resp.json()["usage"]
    total = resp.json()["usage"]["prompt_tokens"]
    assert c.sample("pdserve_prompt_tokens_total", part="prompt", cached="false") > total - 150
    assert c.sample("pdserve_prompt_tokens_total", part="system", cached="true") == 0
    assert c.sample("pdserve_cache_breaks_total", part="system") == 0


async def test_thousands_of_conversations_stay_within_the_memory_bound() -> None:
    max_bytes = 1 << 16
    c = Client(max_bytes=max_bytes)
    for i in range(2000):
        resp = await c.chat(step(0, f"c{i} {SYSTEM}"), user=f"user-{i}")
        assert resp.status_code == 200
    metrics = (await c.http.get("/metrics")).text
    gauges = {
        line.split()[0]: float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("pdserve_conversation")
    }
    # Each conversation: 205 tokens (820 bytes) + 200 bytes of overhead.
    assert 0 < gauges["pdserve_conversation_state_bytes"] <= max_bytes
    assert gauges["pdserve_conversations"] == max_bytes // (4 * 205 + 200)


async def test_conversations_are_scoped_by_api_key() -> None:
    """A break reveals where a prompt departs from the conversation's previous one: another
    API key sending the same conversation key must not be compared with it."""
    c = Client()
    alice = {"x-pdserve-conversation": "shared", "authorization": "Bearer alice"}
    mallory = {"x-pdserve-conversation": "shared", "authorization": "Bearer mallory"}
    await c.chat(step(1), headers=alice)
    resp = await c.chat(step(1, "probe " + SYSTEM), headers=mallory)
    assert json.loads(resp.headers["x-pdserve-prompt-cost"])["cache_break"] is None
    resp = await c.chat(step(2, "changed " + SYSTEM), headers=alice)
    brk = json.loads(resp.headers["x-pdserve-prompt-cost"])["cache_break"]
    assert brk is not None and brk["message_index"] == 0
