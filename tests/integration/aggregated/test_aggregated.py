"""Aggregated mode on the real stack: the same router and API over two vLLM engines that
prefill and decode their own requests. Outputs equal plain vLLM's, nothing goes over NIXL,
each engine runs on its own core, and the router still sends a conversation's next step to
the engine that caches its prefix."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import httpx
import openai
import psutil
import pytest

from pdserve.cluster_procs import Scope, pool_engines
from tests.integration.aggregated.settings import RAY_PORT_AGG
from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words

MAX_TOKENS = 16


def _chat(url: str, messages: list[dict[str, str]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(response body, decision header) of one greedy chat completion."""
    resp = httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "model": "pdserve-demo",
            "messages": messages,
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
        },
        timeout=120,
    )
    assert resp.status_code == 200, resp.text
    return resp.json(), json.loads(resp.headers["x-pdserve-decision"])


def test_only_the_decode_pool_exists_and_is_ready(aggregated: Cluster) -> None:
    ready = httpx.get(f"{aggregated.url}/ready", timeout=30).json()
    assert ready["ready"] and ready["pools"] == {"decode": True}
    replicas = httpx.get(f"{aggregated.url}/v1/pdserve/replicas", timeout=30).json()
    assert replicas["pools"]["prefill"] == []
    assert len(replicas["pools"]["decode"]) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_outputs_equal_plain_vllm_and_nothing_moves_over_nixl(
    aggregated: Cluster, reference: openai.OpenAI, stream: bool
) -> None:
    text = text_of_words(800, salt=4100 + int(stream))  # ~1,600 tokens: remote if disaggregated
    messages = [{"role": "user", "content": text}]
    expected = reference.chat.completions.create(
        model="pdserve-demo", messages=messages, max_tokens=MAX_TOKENS, temperature=0
    )
    transfers = aggregated.metric("pdserve_kv_transfers_total")
    client = aggregated.client()
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="pdserve-demo", messages=messages, max_tokens=MAX_TOKENS, temperature=0,
                stream=True, stream_options={"include_usage": True},
            )
        )  # fmt: skip
        got = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        usage = chunks[-1].usage
    else:
        resp = client.chat.completions.create(
            model="pdserve-demo", messages=messages, max_tokens=MAX_TOKENS, temperature=0
        )
        got, usage = resp.choices[0].message.content or "", resp.usage
    assert got == expected.choices[0].message.content
    assert usage is not None and expected.usage is not None
    assert usage.prompt_tokens == expected.usage.prompt_tokens >= 1500
    assert aggregated.metric("pdserve_kv_transfers_total") == transfers == 0
    local = aggregated.metric("pdserve_requests_total", {"decision": "local_prefill"})
    assert local >= 1


def test_a_conversation_step_goes_to_the_engine_that_caches_its_prefix(
    aggregated: Cluster,
) -> None:
    history = [
        {"role": "system", "content": text_of_words(400, salt=4200)},
        {"role": "user", "content": "step one"},
    ]
    body, first = _chat(aggregated.url, history)
    assert first["prefill"] is None and first["reason"].startswith("aggregated:")
    history += [
        {"role": "assistant", "content": body["choices"][0]["message"]["content"]},
        {"role": "user", "content": "step two " + text_of_words(40, salt=4201)},
    ]
    body, second = _chat(aggregated.url, history)
    assert second["decode"] == first["decode"], "the next step left its cached prefix"
    cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 640, f"only {cached} tokens came from the prefix cache"
    assert second["cached_tokens"] >= 640  # the router knew it before sending


def _pinned_cores(proc: psutil.Process) -> set[int]:
    """The cores of `proc`'s threads that are pinned to one core: OpenMP binds each of the
    worker's compute threads to one core of its list, and pdserve pins the EngineCore's
    threads to the replica's cores."""
    cores: set[int] = set()
    for task in pathlib.Path(f"/proc/{proc.pid}/task").iterdir():
        try:
            allowed = (task / "status").read_text().split("Cpus_allowed_list:")[1].split()[0]
        except (OSError, IndexError):
            continue  # the thread exited
        if "-" not in allowed and "," not in allowed:
            cores.add(int(allowed))
    return cores


def test_each_engine_computes_on_its_own_core(aggregated: Cluster) -> None:
    """cpu_cores_per_replica [[0], [1]]: each engine's worker and its EngineCore are on the
    replica's one core, and the two engines are on different cores, like deploy/local.yaml's
    prefill and decode engines."""
    del aggregated
    scope = Scope(RAY_PORT_AGG)
    engines = [e for role in ("prefill", "decode") for e in pool_engines(scope, role)]
    # EngineCore pid -> (its pinned cores, each worker's pinned cores)
    seen = {core.pid: (_pinned_cores(core), [_pinned_cores(w) for w in ws]) for core, ws in engines}
    assert len(seen) == 2, f"engines: {seen}"
    for core_cores, worker_cores in seen.values():
        assert len(worker_cores) == 1, f"engines: {seen}"
        assert len(worker_cores[0]) == 1 and core_cores == worker_cores[0], f"engines: {seen}"
    assert sorted(sorted(c) for c, _ in seen.values()) == [[0], [1]], f"engines: {seen}"
