"""Spill-over on the 2 prefill + 1 decode cluster: when the whole prefill pool is backed up, a
prompt prefills on its decode replica instead (predicted sooner), with the same output, and
the backed-up prompts are not lost.

The backlog is made deterministic: both prefill engines are held stopped (SIGSTOP, for a few
seconds, well under `prefill.unresponsive_after_seconds`) while two long prompts are sent to
them, so their replicas report those prompts as queued prefill work until they resume."""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from pdserve.bench.fault_inject import engine_cores, signal_engine
from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words
from tests.integration.two_prefill.settings import RAY_PORT_2P1D


def _complete(http: httpx.Client, prompt: str, policy: str) -> httpx.Response:
    body = {"model": "pdserve-demo", "prompt": prompt, "max_tokens": 8, "temperature": 0}
    # Fair sharing off: this cluster has tenants, and with sharing the router would hold the
    # excess in its own queue instead of letting the prefill engines back up. The measured pace
    # off: with this cluster's default cost model (20x this model's prefill) it would scale the
    # stopped engines' backlog down to what they usually take, not what they take stopped.
    headers = {"x-pdserve-policy": policy, "x-pdserve-fair-share": "off", "x-pdserve-pace": "off"}
    return http.post("/v1/completions", json=body, headers=headers)


def _queued(http: httpx.Client) -> list[int]:
    pool: list[dict[str, Any]] = http.get("/v1/pdserve/replicas").json()["pools"]["prefill"]
    return [int(r["queued_prefill_tokens"]) for r in pool]


def test_a_prompt_spills_to_decode_while_the_prefill_pool_is_backed_up(
    two_prefill: Cluster,
) -> None:
    long_prompts = [text_of_words(3000, salt=9100 + i) for i in range(2)]
    prompt = text_of_words(400, salt=9200)
    prefills = engine_cores(RAY_PORT_2P1D, "prefill")
    with two_prefill.http(timeout_s=120) as http, ThreadPoolExecutor(2) as pool:
        for engine in prefills:
            signal_engine(engine, signal.SIGSTOP)
        try:
            # One long prompt per prefill replica (round-robin alternates between them).
            backed_up = [pool.submit(_complete, http, p, "round_robin") for p in long_prompts]
            deadline = time.monotonic() + 10  # the engines' stats arrive every 0.5 s
            while min(_queued(http)) == 0:
                assert time.monotonic() < deadline, f"no prefill queue reported: {_queued(http)}"
                time.sleep(0.1)
            spilled = _complete(http, prompt, "pdserve")
        finally:
            for engine in prefills:
                signal_engine(engine, signal.SIGCONT)
        assert spilled.status_code == 200, spilled.text
        decision = json.loads(spilled.headers["x-pdserve-decision"])
        served = json.loads(spilled.headers["x-pdserve-served-by"])
        assert decision["prefill"] is None and decision["reason"].startswith("spill"), decision
        assert served["prefill"] is None, served  # really prefilled on the decode engine
        local = decision["predicted_ttft_s"][f"local:{decision['decode']}"]
        remote = [v for k, v in decision["predicted_ttft_s"].items() if not k.startswith("local:")]
        assert len(remote) == 2 and local < min(remote), decision
        for answer in backed_up:  # nothing queued behind the stopped engines is lost
            resp = answer.result(timeout=120)
            assert resp.status_code == 200, resp.text
        # Same greedy output as a remote prefill of the same prompt (NIXL-transferred KV).
        again = _complete(http, prompt, "round_robin")
    assert json.loads(again.headers["x-pdserve-decision"])["prefill"] is not None
    assert again.json()["choices"][0]["text"] == spilled.json()["choices"][0]["text"]
