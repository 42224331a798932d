"""OpenAI request validation and the unsupported-parameter rules (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from pdserve.router.openai_models import ChatCompletionRequest, CompletionRequest

HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 3}, "n"),
        ({"best_of": 2}, "best_of"),
        ({"logit_bias": {"1": 2.0}}, "logit_bias"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_chat_unsupported_fields_are_named(extra: dict[str, Any], param: str) -> None:
    req = ChatCompletionRequest.model_validate({"model": "m", "messages": HI, **extra})
    found = req.unsupported_reason()
    assert found is not None and found[0] == param


def test_chat_supported_fields_pass() -> None:
    req = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": HI,
            "max_completion_tokens": 5,
            "logprobs": True,
            "top_logprobs": 3,
            "stop": "x",
            "tool_choice": "none",
            "response_format": {"type": "text"},
            "unknown_client_field": 1,
        }
    )
    assert req.unsupported_reason() is None
    assert req.requested_max_tokens() == 5
    assert req.num_logprobs() == 3
    assert req.stop_list() == ("x",)


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": []},
        {"model": "m"},
        {"model": "", "messages": HI},
        {"model": "m", "messages": HI, "max_tokens": 0},
        {"model": "m", "messages": HI, "temperature": -1},
        {"model": "m", "messages": [{"role": "wizard", "content": "x"}]},
    ],
)
def test_chat_invalid_bodies(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate(body)


def test_text_parts_join_and_images_are_rejected() -> None:
    req = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                }
            ],
        }
    )
    assert req.messages[0].text() == "ab"
    img = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}
    )
    with pytest.raises(ValueError, match="text only"):
        img.messages[0].text()


@pytest.mark.parametrize(
    ("prompt", "single"),
    [("abc", "abc"), ([1, 2, 3], [1, 2, 3]), (["only"], "only"), ([[5, 6]], [5, 6])],
)
def test_completion_single_prompt_forms(prompt: Any, single: Any) -> None:
    req = CompletionRequest.model_validate({"model": "m", "prompt": prompt})
    assert req.single_prompt() == single


@pytest.mark.parametrize("prompt", ["", [], ["a", "b"], [[1], [2]]])
def test_completion_rejects_empty_and_batched(prompt: Any) -> None:
    with pytest.raises(ValidationError):
        CompletionRequest.model_validate({"model": "m", "prompt": prompt})


@pytest.mark.parametrize(
    ("extra", "param"), [({"echo": True}, "echo"), ({"suffix": "x"}, "suffix"), ({"n": 2}, "n")]
)
def test_completion_unsupported(extra: dict[str, Any], param: str) -> None:
    req = CompletionRequest.model_validate({"model": "m", "prompt": "p", **extra})
    found = req.unsupported_reason()
    assert found is not None and found[0] == param
