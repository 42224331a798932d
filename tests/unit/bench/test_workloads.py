"""Workload generation: mixed bursts, agent growth, trace sharing, synthetic lengths (pure)."""

from __future__ import annotations

import itertools
import random

import pytest

from pdserve.bench.agent import advance, start_conversation, step_request
from pdserve.bench.config import BenchConfig
from pdserve.bench.mixed import LONG, SHORT, build_mixed, burst_arrivals, mixed_classes
from pdserve.bench.prompts import PromptFactory
from pdserve.bench.synthetic import build_synthetic
from pdserve.bench.trace import TraceRecord, build_trace, parse_trace


def _runs(classes: list[str], cls: str) -> list[int]:
    return [len(list(g)) for k, g in itertools.groupby(classes) if k == cls]


@pytest.mark.parametrize(
    ("n", "fraction", "burst", "num_long", "long_runs"),
    [
        (200, 0.5, 4, 100, [4] * 25),
        (40, 0.5, 4, 20, [4] * 5),
        (10, 0.3, 2, 3, [2, 1]),
        (20, 0.0, 4, 0, []),
        (7, 1.0, 3, 7, [7]),  # no shorts to separate bursts: one run
        (9, 0.5, 1, 4, [1, 1, 1, 1]),
    ],
)
def test_mixed_classes(
    n: int, fraction: float, burst: int, num_long: int, long_runs: list[int]
) -> None:
    classes = mixed_classes(n, fraction, burst)
    assert len(classes) == n
    assert classes.count(LONG) == num_long and classes.count(SHORT) == n - num_long
    assert _runs(classes, LONG) == long_runs


def test_mixed_bursts_are_spread_through_the_shorts() -> None:
    short_runs = _runs(mixed_classes(200, 0.5, 4), SHORT)
    assert len(short_runs) == 26 and max(short_runs) - min(short_runs) <= 1


def test_burst_members_arrive_together() -> None:
    classes = mixed_classes(40, 0.5, 4)
    times = burst_arrivals(classes, 5.0, random.Random(0))
    assert times == sorted(times)
    for i in range(1, len(classes)):
        same = classes[i] == LONG and classes[i - 1] == LONG
        assert (times[i] == times[i - 1]) == same


def test_build_mixed(factory: PromptFactory) -> None:
    cfg = BenchConfig(num_requests=20, short_tokens=53, long_tokens=1503, request_rate=2.0)
    specs = build_mixed(cfg, factory)
    assert [s.index for s in specs] == list(range(20))
    assert {s.request_class: s.target_prompt_tokens for s in specs} == {SHORT: 53, LONG: 1503}
    lengths = {s.request_class: len(str(s.prompt).split()) - 1 for s in specs}
    assert lengths == {SHORT: 40, LONG: 1200}
    assert len({str(s.prompt).split()[0] for s in specs}) == 20  # unique tags
    assert all(s.max_tokens == 32 and s.arrival_s is not None for s in specs)
    assert build_mixed(cfg.model_copy(update={"request_rate": None}), factory)[3].arrival_s is None


def test_phases_get_same_lengths_but_different_text(factory: PromptFactory) -> None:
    cfg = BenchConfig(num_requests=10, request_rate=1.0)
    other = PromptFactory(factory.calibration, salt="s1")
    a, b = build_mixed(cfg, factory), build_mixed(cfg, other)
    assert [(s.request_class, s.arrival_s) for s in a] == [
        (s.request_class, s.arrival_s) for s in b
    ]
    assert all(x.prompt != y.prompt for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("tool_role", ["tool", "user"])
def test_agent_conversation_grows_by_reply_and_tool_result(
    factory: PromptFactory, tool_role: str
) -> None:
    cfg = BenchConfig(workload="agent", steps=3, tool_result_tokens=400, tool_role=tool_role)
    conv = start_conversation(1, cfg, factory)
    assert [m.role for m in conv.messages] == ["system", "user"]
    initial_words = sum(len(m.content.split()) for m in conv.messages)
    assert initial_words == pytest.approx((500 - 3) / 1.25, abs=8)
    sizes = []
    for step in range(3):
        spec = step_request(conv, cfg, 1_700_000_000.0 + step)
        assert spec.messages == conv.messages and spec.conversation is None  # no breaker
        assert (spec.endpoint, spec.agent, spec.step, spec.index) == ("chat", 1, step, 3 + step)
        sizes.append(len(spec.messages or ()))
        prev = conv.messages
        conv = advance(conv, f"reply {step}", cfg, factory)
        assert conv.messages[: len(prev)] == prev  # the old conversation is a prefix
        assistant, tool = conv.messages[-2:]
        assert assistant.role == "assistant" and assistant.content == f"reply {step}"
        assert tool.role == tool_role
        assert len(tool.content.split()) == pytest.approx(320, abs=3)
        if tool_role == "user":
            assert tool.content.startswith("Tool result: ")
        else:
            assert tool.tool_call_id == f"call_1_{step}"
    assert sizes == [2, 4, 6]


def test_timestamp_breaker_changes_only_the_system_prompt_start(factory: PromptFactory) -> None:
    cfg = BenchConfig(workload="agent", cache_breaker="timestamp")
    conv = start_conversation(2, cfg, factory, key="bench-x-agent-2")
    a = step_request(conv, cfg, 1_700_000_000.25)
    conv = advance(conv, "reply", cfg, factory)
    b = step_request(conv, cfg, 1_700_000_001.5)
    assert a.messages is not None and b.messages is not None
    assert a.conversation == b.conversation == "bench-x-agent-2"
    assert a.messages[0].content.startswith("Current time: 2023-11-14T22:13:20.250000+00:00. ")
    assert a.messages[0].content != b.messages[0].content
    original = conv.messages[0].content
    assert a.messages[0].content.endswith(original) and b.messages[0].content.endswith(original)
    assert a.messages[1:] == b.messages[1:2]  # the rest of the history is unchanged


def test_agents_have_unique_starts_per_agent_and_salt(factory: PromptFactory) -> None:
    cfg = BenchConfig(workload="agent")
    other = PromptFactory(factory.calibration, salt="s1")
    firsts = {
        start_conversation(a, cfg, f).messages[0].content[:8]
        for a in range(4)
        for f in (factory, other)
    }
    assert len(firsts) == 8


TRACE = """
{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}
{"timestamp": 500, "input_length": 1500, "output_length": 900, "hash_ids": [0, 1, 2]}
{"timestamp": 2000, "input_length": 700, "output_length": 3, "hash_ids": [5, 1]}

{"timestamp": 2500, "input_length": 9000, "output_length": 3, "hash_ids": [6, 7]}
""".splitlines()


def test_parse_trace() -> None:
    records = parse_trace(TRACE)
    assert records[1] == TraceRecord(500.0, 1500, 900, (0, 1, 2))
    assert len(records) == 4
    with pytest.raises(ValueError, match="trace line 2"):
        parse_trace(['{"timestamp": 0, "input_length": 1, "output_length": 1}', "{}"])


def test_trace_prefix_sharing_follows_hash_ids(factory: PromptFactory) -> None:
    cfg = BenchConfig(
        workload="trace", trace="t.jsonl", trace_block_tokens=500, trace_time_scale=0.5
    )
    plan = build_trace(parse_trace(TRACE), cfg, factory)
    words = [str(s.prompt).split()[1:] for s in plan.specs]  # after the phase tag
    block = 400  # 500 tokens / 1.25 tokens per word
    assert words[0][: 2 * block - 3] == words[1][: 2 * block - 3]  # shares blocks 0 and 1
    assert words[2][:block] != words[0][:block]  # starts with a different block
    assert [s.arrival_s for s in plan.specs] == [0.0, 0.25, 1.0, 1.25]
    assert [s.max_tokens for s in plan.specs] == [5, 900, 3, 3]


@pytest.mark.parametrize(
    ("mode", "lengths", "clipped", "skipped"),
    [("clip", [1000, 1200, 700, 1200], 2, 0), ("skip", [1000, 700], 0, 2)],
)
def test_trace_limits(
    factory: PromptFactory, mode: str, lengths: list[int], clipped: int, skipped: int
) -> None:
    cfg = BenchConfig(workload="trace", trace="t", max_input_tokens=1200, clip_mode=mode)
    plan = build_trace(parse_trace(TRACE), cfg, factory)
    assert [s.target_prompt_tokens for s in plan.specs] == lengths
    assert (plan.num_input_clipped, plan.num_skipped) == (clipped, skipped)


def test_trace_scaling_and_max_requests(factory: PromptFactory) -> None:
    cfg = BenchConfig(workload="trace", trace="t", trace_length_scale=0.1, max_requests=3)
    plan = build_trace(parse_trace(TRACE), cfg, factory)
    assert [s.target_prompt_tokens for s in plan.specs] == [100, 150, 70]
    assert [s.max_tokens for s in plan.specs] == [5, 900, 3]  # outputs are not scaled


def test_synthetic_is_seeded_and_clipped(factory: PromptFactory) -> None:
    cfg = BenchConfig(
        workload="synthetic", num_requests=50, input_dist="uniform:100:2000",
        output_dist="fixed:20", max_input_tokens=1500, seed=7,
    )  # fmt: skip
    plan = build_synthetic(cfg, factory)
    lengths = [s.target_prompt_tokens for s in plan.specs]
    assert lengths == [s.target_prompt_tokens for s in build_synthetic(cfg, factory).specs]
    assert lengths != [
        s.target_prompt_tokens
        for s in build_synthetic(cfg.model_copy(update={"seed": 8}), factory).specs
    ]
    assert all(100 <= n <= 1500 for n in lengths) and max(lengths) == 1500
    assert plan.num_input_clipped == sum(n == 1500 for n in lengths) > 0
    assert plan.num_output_clipped == 0
    assert all(s.max_tokens == 20 for s in plan.specs)


def test_trace_output_limit(factory: PromptFactory) -> None:
    cfg = BenchConfig(workload="trace", trace="t", max_output_tokens=64)
    plan = build_trace(parse_trace(TRACE), cfg, factory)
    assert [s.max_tokens for s in plan.specs] == [5, 64, 3, 3]
    assert (plan.num_input_clipped, plan.num_output_clipped) == (0, 1)
