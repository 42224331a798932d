"""Options validation and request bodies (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from pdserve.bench.config import BenchConfig
from pdserve.bench.models import ChatMessage, RequestSpec
from pdserve.bench.payload import POLICY_HEADER, request_body, request_headers
from pdserve.router.headers import ITL_GUARD_HEADER, KV_VERIFY_HEADER, PACE_HEADER


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"workload": "trace"}, "needs --trace"),
        ({"workload": "agent", "token_ids": True}, "completions only"),
        ({"input_dist": "zipf:2"}, "unknown distribution"),
        ({"policies": ("a", "a")}, "distinct"),
        ({"policies": ("a", "")}, "non-empty"),
        ({"workload": "bogus"}, "workload"),
        ({"long_fraction": 1.5}, "less than or equal"),
        ({"concurrency": 0}, "greater than 0"),
        ({"no_such_option": 1}, "Extra inputs"),
    ],
)
def test_invalid_options(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        BenchConfig(**options)


def test_policy_names() -> None:
    assert BenchConfig().policy_names == ("default",)
    assert BenchConfig(policies=("rr", "pd")).policy_names == ("rr", "pd")


def test_completion_body_is_streaming_greedy_and_exact_length() -> None:
    spec = RequestSpec(0, "short", 32, 50, prompt="hello")
    body = request_body(spec, "m")
    assert body == {
        "model": "m", "stream": True, "stream_options": {"include_usage": True},
        "max_tokens": 32, "temperature": 0, "ignore_eos": True, "prompt": "hello",
    }  # fmt: skip
    assert spec.endpoint == "completions"


def test_token_id_and_chat_bodies() -> None:
    ids = request_body(RequestSpec(0, "c", 4, 3, prompt=(11, 12, 13)), "m")
    assert ids["prompt"] == [11, 12, 13]
    msgs = (ChatMessage("user", "hi"), ChatMessage("tool", "42", tool_call_id="call_0_0"))
    chat = request_body(RequestSpec(0, "agent", 4, 0, messages=msgs), "m")
    assert chat["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "tool", "content": "42", "tool_call_id": "call_0_0"},
    ]
    assert "prompt" not in chat


def test_spec_needs_exactly_one_prompt_kind() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        RequestSpec(0, "c", 4, 3)
    with pytest.raises(ValueError, match="exactly one"):
        RequestSpec(0, "c", 4, 3, prompt="a", messages=(ChatMessage("user", "b"),))


def test_policy_header() -> None:
    assert request_headers(None) == {}
    assert request_headers("pdserve") == {POLICY_HEADER: "pdserve"}


def test_kv_verify_phases_send_the_kv_verify_header_and_not_a_policy() -> None:
    assert request_headers("kv-verify:off") == {KV_VERIFY_HEADER: "off"}
    assert request_headers("kv-verify:on") == {KV_VERIFY_HEADER: "on"}
    BenchConfig(policies=("kv-verify:on", "kv-verify:off"))
    with pytest.raises(ValidationError, match="kv-verify:on or kv-verify:off"):
        BenchConfig(policies=("kv-verify:maybe", "kv-verify:off"))


def test_itl_guard_phases_send_the_itl_guard_header_and_not_a_policy() -> None:
    assert request_headers("itl-guard:off") == {ITL_GUARD_HEADER: "off"}
    assert request_headers("itl-guard:on") == {ITL_GUARD_HEADER: "on"}
    BenchConfig(policies=("round_robin", "itl-guard:off", "itl-guard:on"))
    with pytest.raises(ValidationError, match="itl-guard:on or itl-guard:off"):
        BenchConfig(policies=("itl-guard:auto", "itl-guard:off"))
    assert request_headers("pace:off") == {PACE_HEADER: "off"}
    assert request_headers("pace:on") == {PACE_HEADER: "on"}
    BenchConfig(policies=("round_robin", "pace:off", "pace:on"))
    with pytest.raises(ValidationError, match="pace:on or pace:off"):
        BenchConfig(policies=("pace:auto", "pace:off"))
