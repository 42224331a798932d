"""A prompt prefilled on the decode engine while streams decode there is weighed by the ITL
guard (router.routing.itl_slo_s, 0.1 s by default; deploy/local.yaml prefills prompts under 128
uncached tokens on decode): its decision names the streams' ITL budget, the predicted step and
chunk, the guard's verdict is counted, and the decode engine's scheduler (its ITL-budget
subclass of vLLM's) measures the steps that carried the prompt beside the streams
(pdserve_decode_stall_seconds). `x-pdserve-itl-guard: off` skips the guard for one request."""

from __future__ import annotations

import json
import threading
import time

import openai
import pytest

from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words

STREAMS = 4


def _stream(client: openai.OpenAI, salt: int, started: threading.Event, done: list[int]) -> None:
    stream = client.completions.create(
        model="pdserve-demo",
        prompt=text_of_words(20, salt=salt),
        max_tokens=400,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    n = 0
    for chunk in stream:
        n += len(chunk.choices[0].text) if chunk.choices else 0
        started.set()
    done.append(n)


def _decide(client: openai.OpenAI, salt: int, guard: str | None = None) -> dict[str, object]:
    headers = {"x-pdserve-itl-guard": guard} if guard else {}
    raw = client.completions.with_raw_response.create(
        model="pdserve-demo",
        prompt=text_of_words(40, salt=salt),
        max_tokens=1,
        temperature=0,
        extra_headers=headers,
    )
    assert raw.http_response.status_code == 200
    decision: dict[str, object] = json.loads(raw.headers["x-pdserve-decision"])
    return decision


def _stall(cluster: Cluster) -> float:
    return cluster.metric("pdserve_decode_stall_seconds_count", {"pool": "decode"})


def test_a_local_prefill_beside_streams_is_weighed_chunked_and_measured(
    cluster: Cluster,
) -> None:
    client = cluster.client()
    budget_s = cluster.config.router.routing.itl_slo_s
    assert budget_s is not None
    worth_before = cluster.metric("pdserve_itl_guard_decisions_total", {"verdict": "worth"})
    stall_before = _stall(cluster)
    started = [threading.Event() for _ in range(STREAMS)]
    done: list[int] = []
    threads = [
        threading.Thread(target=_stream, args=(client, 7000 + i, started[i], done), daemon=True)
        for i in range(STREAMS)
    ]
    for t in threads:
        t.start()
    for e in started:
        assert e.wait(60), "a stream never started"
    time.sleep(1.0)  # the engine's stats (its running streams) reach the router's view
    guarded = _decide(client, 8101)
    skipped = _decide(client, 8102, guard="off")
    for t in threads:
        t.join(120)
    assert len(done) == STREAMS and all(n > 0 for n in done), done

    assert guarded["prefill"] is None, guarded  # prefilled on decode, as the rules say
    itl = guarded.get("itl")
    assert isinstance(itl, dict), guarded
    assert itl["verdict"] == "worth" and itl["budget_s"] == pytest.approx(budget_s)
    assert int(itl["streams"]) >= 1 and int(itl["chunk_tokens"]) >= 1 and int(itl["steps"]) >= 1
    assert 0 < float(itl["step_s"]) <= budget_s
    assert "itl budget" in str(guarded["reason"])
    assert skipped["prefill"] is None and "itl" not in skipped, skipped

    assert (
        cluster.metric("pdserve_itl_guard_decisions_total", {"verdict": "worth"})
        >= worth_before + 1
    )
    # The engine reports the steps that carried the prompts beside the streams with its next
    # stats; the router folds them in when it polls the replicas.
    deadline = time.monotonic() + 15
    while _stall(cluster) <= stall_before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _stall(cluster) > stall_before


def test_a_bad_itl_guard_header_is_a_400(cluster: Cluster) -> None:
    with cluster.http() as http:
        resp = http.post(
            "/v1/completions",
            json={"model": "pdserve-demo", "prompt": "hi", "max_tokens": 1},
            headers={"x-pdserve-itl-guard": "maybe"},
        )
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == "x-pdserve-itl-guard" and "on, off" in error["message"]
