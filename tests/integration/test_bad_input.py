"""Bad input gets a 4xx with an OpenAI-format error body naming the problem, never a 500 or a
hang, and the cluster keeps serving afterwards."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
HI = [{"role": "user", "content": "hi"}]

# (id, path, raw body or JSON object, expected status, words the message must contain, param)
CASES: list[tuple[str, str, Any, int, list[str], str | None]] = [
    ("malformed-json", CHAT, b'{"model": "pdserve-demo", "messages": [', 400, ["json"], None),
    ("body-not-object", CHAT, b"[1, 2, 3]", 400, ["json object"], None),
    ("missing-messages", CHAT, {"model": "pdserve-demo"}, 400, ["messages"], "messages"),
    ("missing-model", CHAT, {"messages": HI}, 400, ["model"], "model"),
    ("missing-prompt", COMPLETIONS, {"model": "pdserve-demo"}, 400, ["prompt"], "prompt"),
    (
        "max-tokens-wrong-type",
        CHAT,
        {"model": "pdserve-demo", "messages": HI, "max_tokens": "ten"},
        400,
        ["max_tokens"],
        "max_tokens",
    ),
    (
        "messages-wrong-type",
        CHAT,
        {"model": "pdserve-demo", "messages": "hello"},
        400,
        ["messages"],
        "messages",
    ),
    (
        "unknown-model",
        CHAT,
        {"model": "gpt-9", "messages": HI},
        404,
        ["gpt-9", "does not exist"],
        "model",
    ),
    (
        "max-tokens-zero",
        CHAT,
        {"model": "pdserve-demo", "messages": HI, "max_tokens": 0},
        400,
        ["max_tokens", "greater than 0"],
        "max_tokens",
    ),
    (
        "max-tokens-negative",
        COMPLETIONS,
        {"model": "pdserve-demo", "prompt": "hi", "max_tokens": -5},
        400,
        ["max_tokens"],
        "max_tokens",
    ),
    (
        "empty-messages",
        CHAT,
        {"model": "pdserve-demo", "messages": []},
        400,
        ["messages", "at least 1"],
        "messages",
    ),
    (
        "prompt-too-long",
        COMPLETIONS,
        {"model": "pdserve-demo", "prompt": text_of_words(2500), "max_tokens": 4},
        400,
        ["maximum context length", "4096"],
        "prompt",
    ),
    (
        "prompt-plus-max-tokens-too-long",
        COMPLETIONS,
        {"model": "pdserve-demo", "prompt": "hello there", "max_tokens": 5000},
        400,
        ["maximum context length", "max_tokens"],
        "max_tokens",
    ),
    (
        "n-greater-than-one",
        CHAT,
        {"model": "pdserve-demo", "messages": HI, "n": 2},
        400,
        ["n > 1"],
        "n",
    ),
    (
        "tools-unsupported",
        CHAT,
        {"model": "pdserve-demo", "messages": HI, "tools": [{"type": "function"}]},
        400,
        ["tool"],
        "tools",
    ),
    (
        "bad-role",
        CHAT,
        {"model": "pdserve-demo", "messages": [{"role": "robot", "content": "hi"}]},
        400,
        ["role"],
        "messages.0.role",
    ),
    (
        "token-id-out-of-vocab",
        COMPLETIONS,
        {"model": "pdserve-demo", "prompt": [1, 2, 99999999], "max_tokens": 2},
        400,
        ["token ids"],
        "prompt",
    ),
    (
        "batched-prompts",
        COMPLETIONS,
        {"model": "pdserve-demo", "prompt": ["a", "b"], "max_tokens": 2},
        400,
        ["batched"],
        "prompt",
    ),
    (
        "temperature-out-of-range",
        CHAT,
        {"model": "pdserve-demo", "messages": HI, "temperature": 7},
        400,
        ["temperature"],
        "temperature",
    ),
    (
        "lone-surrogate-in-prompt",
        COMPLETIONS,
        b'{"model": "pdserve-demo", "prompt": "tell me \\ud800 more", "max_tokens": 2}',
        400,
        ["not valid unicode"],
        "prompt",
    ),
    (
        "lone-surrogate-in-chat",
        CHAT,
        b'{"model": "pdserve-demo", "messages": [{"role": "user", "content": "\\udfff"}]}',
        400,
        ["not valid unicode"],
        "messages[0].content",
    ),
    (
        "huge-stop-list",
        COMPLETIONS,
        {"model": "pdserve-demo", "prompt": "hi", "stop": [f"s{i}" for i in range(100_000)]},
        400,
        ["at most 16 stop strings"],
        "stop",
    ),
    (
        "seed-out-of-range",
        COMPLETIONS,
        {"model": "pdserve-demo", "prompt": "hi", "seed": 2**70},
        400,
        ["seed"],
        "seed",
    ),
    (
        "infinite-repetition-penalty",
        COMPLETIONS,
        b'{"model": "pdserve-demo", "prompt": "hi", "repetition_penalty": Infinity}',
        400,
        ["finite"],
        "repetition_penalty",
    ),
    (
        "stop-token-id-out-of-vocab",
        COMPLETIONS,
        {"model": "pdserve-demo", "prompt": "hi", "stop_token_ids": [99999999]},
        400,
        ["stop_token_ids"],
        "stop_token_ids",
    ),
    (
        "body-over-max-request-bytes",
        COMPLETIONS,
        {"model": "pdserve-demo", "prompt": "x" * (9 << 20)},
        413,
        ["too large", "max_request_bytes"],
        None,
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "status", "words", "param"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_bad_input_is_a_clear_4xx_then_the_cluster_still_serves(
    cluster: Cluster, path: str, body: Any, status: int, words: list[str], param: str | None
) -> None:
    with httpx.Client(base_url=cluster.url, timeout=30) as http:
        if isinstance(body, bytes):
            resp = http.post(path, content=body, headers={"content-type": "application/json"})
        else:
            resp = http.post(path, json=body)
        assert resp.status_code == status, resp.text
        error = resp.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        message = error["message"].lower()
        for word in words:
            assert word.lower() in message, f"{word!r} not in {error['message']!r}"
        assert error["param"] == param
        assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")

        ok = http.post(
            CHAT, json={"model": "pdserve-demo", "messages": HI, "max_tokens": 3, "temperature": 0}
        )
        assert ok.status_code == 200, ok.text
        assert ok.json()["usage"]["completion_tokens"] == 3


def test_concurrent_requests_reusing_an_x_request_id_are_both_served(cluster: Cluster) -> None:
    """Engine and placement ids stay unique when clients reuse x-request-id."""
    bodies = [
        {"model": "pdserve-demo", "prompt": text_of_words(400, salt=salt), "max_tokens": 8}
        for salt in (71, 72)
    ]
    headers = {"x-request-id": "same-id-twice"}
    with ThreadPoolExecutor(2) as pool:
        responses = list(
            pool.map(
                lambda body: httpx.post(
                    f"{cluster.url}{COMPLETIONS}", json=body, headers=headers, timeout=60
                ),
                bodies,
            )
        )
    assert [r.status_code for r in responses] == [200, 200], [r.text for r in responses]
    assert all(r.json()["usage"]["completion_tokens"] == 8 for r in responses)


def test_unknown_route_is_openai_404(cluster: Cluster) -> None:
    resp = httpx.get(f"{cluster.url}/v1/nope", timeout=10)
    assert resp.status_code == 404
    assert "error" in resp.json()
