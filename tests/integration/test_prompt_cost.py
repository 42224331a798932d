"""Prompt cost by part and cache-break detection on the real local cluster (issue: context
cost for agent builders): 6-step agent loops through the official `openai` client, stable and
with a changing timestamp in the system prompt, as an agent builder would run them."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words

MODEL = "pdserve-demo"
STEPS = 6


def _messages(system: str, steps_done: int, replies: list[str]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Task: " + text_of_words(60, salt=3)},
    ]
    for i in range(steps_done):
        msgs.append({"role": "assistant", "content": replies[i]})
        msgs.append({"role": "tool", "content": text_of_words(120, salt=100 + i),
                     "tool_call_id": f"call_{i}"})  # fmt: skip
    return msgs


def _run_loop(cluster: Cluster, user: str, stamped: bool, salt: int) -> list[dict[str, Any]]:
    """Run a 6-step loop; per step the usage, its prompt cost and the header's."""
    client = cluster.client()
    base = "You are a careful agent. " + text_of_words(200, salt=salt)
    replies: list[str] = []
    out = []
    for step in range(STEPS):
        system = f"Current time: {time.time():.6f}. {base}" if stamped else base
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=_messages(system, step, replies),  # type: ignore[arg-type]
            max_tokens=8,
            temperature=0,
            user=user,
        )
        resp = raw.parse()
        assert resp.usage is not None
        usage = resp.usage.model_dump()
        out.append(
            {
                "usage": usage,
                "cost": usage["pdserve_prompt_cost"],
                "header": json.loads(raw.headers["x-pdserve-prompt-cost"]),
            }
        )
        replies.append(resp.choices[0].message.content or "")
    return out


def _check_adds_up(step: dict[str, Any]) -> None:
    usage, cost = step["usage"], step["cost"]
    parts = cost["parts"]
    assert sum(p["cached"] + p["computed"] for p in parts.values()) == usage["prompt_tokens"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert sum(p["cached"] for p in parts.values()) == cached
    assert sum(m["cached"] + m["computed"] for m in cost["messages"]) <= usage["prompt_tokens"]
    assert step["header"] == {"parts": parts, "cache_break": cost["cache_break"]}


def test_stable_agent_loop_reports_parts_that_add_up_and_no_break(cluster: Cluster) -> None:
    breaks_before = cluster.metric("pdserve_cache_breaks_total")
    tool_cached_before = cluster.metric(
        "pdserve_prompt_tokens_total", {"part": "tool", "cached": "true"}
    )
    steps = _run_loop(cluster, "it-stable-agent", stamped=False, salt=9101)
    for i, step in enumerate(steps):
        _check_adds_up(step)
        assert step["cost"]["cache_break"] is None, f"step {i + 1}"
        roles = [m["role"] for m in step["cost"]["messages"]]
        assert roles == ["system", "user"] + ["assistant", "tool"] * i
        assert set(step["cost"]["parts"]) == (
            {"system", "user", "template"} | ({"assistant", "tool"} if i else set())
        )
    # Prefix reuse: the later steps find the conversation so far in a prefix cache, system
    # prompt first, and recent tool results are cached on the step after they arrived.
    last = steps[-1]["cost"]["parts"]
    assert last["system"]["computed"] == 0 and last["system"]["cached"] > 200
    assert last["tool"]["cached"] > 0
    assert cluster.metric("pdserve_cache_breaks_total") == breaks_before
    assert (
        cluster.metric("pdserve_prompt_tokens_total", {"part": "tool", "cached": "true"})
        > tool_cached_before
    )


def test_changing_timestamp_is_a_break_on_every_step_at_the_system_prompt(
    cluster: Cluster,
) -> None:
    before = cluster.metric("pdserve_cache_breaks_total", {"part": "system"})
    steps = _run_loop(cluster, "it-stamped-agent", stamped=True, salt=9102)
    for i, step in enumerate(steps):
        _check_adds_up(step)
        brk = step["cost"]["cache_break"]
        if i == 0:
            assert brk is None  # nothing to compare with yet
            continue
        assert brk is not None, f"step {i + 1}: no break reported"
        assert (brk["message_index"], brk["role"], brk["part"]) == (0, "system", "system")
        previous = steps[i - 1]["usage"]["prompt_tokens"]
        block = cluster.config.router.routing.block_size_tokens
        shared = min(previous, step["usage"]["prompt_tokens"])
        assert brk["lost_tokens"] == shared // block * block - brk["token_index"] // block * block
        # The break costs what it says: almost nothing of the system prompt was cached.
        assert step["cost"]["parts"]["system"]["computed"] > 200
    assert cluster.metric("pdserve_cache_breaks_total", {"part": "system"}) == before + STEPS - 1


def test_streamed_usage_chunk_carries_the_prompt_cost(cluster: Cluster) -> None:
    client = cluster.client()
    stream = client.chat.completions.create(
        model=MODEL,
        messages=_messages("Be brief. " + text_of_words(50, salt=9103), 0, []),  # type: ignore[arg-type]
        max_tokens=4,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
    assert usage is not None
    parts = usage["pdserve_prompt_cost"]["parts"]
    assert sum(p["cached"] + p["computed"] for p in parts.values()) == usage["prompt_tokens"]
