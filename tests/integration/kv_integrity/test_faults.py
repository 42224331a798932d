"""Verified KV on the real stack (vLLM CPU + NIXL + Ray Serve): a handoff that is corrupted,
stale or swapped is never decoded into a wrong answer.

Each case runs twice on one cluster (conftest.py): with the check on (the default,
`kv_transfer.verify: all`), the client's greedy text equals the aggregated reference server's
and the failure is counted with its reason; with the check off for the request
(x-pdserve-kv-verify: off), the same fault produces a wrong answer — so each case can fail.
Prompts are token ids, unique per test: a corrupted prefill engine keeps the bad blocks in its
prefix cache, so no prompt is sent twice to the same engine.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import Any

import openai
import psutil

from pdserve.cluster_procs import Scope, pool_engines
from pdserve.router.headers import DECISION_HEADER, KV_VERIFY_HEADER
from tests.integration.cluster import Cluster
from tests.integration.kv_integrity.settings import LEASE_S, RAY_PORT_KV, Faults

MODEL = "pdserve-demo"
MAX_TOKENS = 16
VOCAB = (10, 2000)


def tokens(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(*VOCAB) for _ in range(n)]


def reference_text(reference: openai.OpenAI, prompt: list[int]) -> str:
    resp = reference.completions.create(
        model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0
    )
    return resp.choices[0].text


def complete(cluster: Cluster, prompt: list[int], verify: bool) -> tuple[str, dict[str, Any]]:
    """(text, x-pdserve-decision) of one greedy completion through the router."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
    with cluster.http(timeout_s=120) as http:
        resp = http.post(
            "/v1/completions", json=body, headers={KV_VERIFY_HEADER: "on" if verify else "off"}
        )
    assert resp.status_code == 200, resp.text
    return resp.json()["choices"][0]["text"], json.loads(resp.headers[DECISION_HEADER])


def counts(cluster: Cluster) -> dict[str, float]:
    out = {
        "checks": cluster.metric("pdserve_kv_integrity_checks_total", {"pool": "decode"}),
        "after_expiry": cluster.metric(
            "pdserve_kv_notifications_after_expiry_total", {"pool": "prefill"}
        ),
    }
    for reason in ("digest", "identity", "stale", "unverifiable"):
        out[reason] = cluster.metric(
            "pdserve_kv_integrity_failures_total", {"pool": "decode", "reason": reason}
        )
    return out


def grown(
    cluster: Cluster, before: dict[str, float], want: dict[str, float], timeout_s: float = 30
) -> dict[str, float]:
    """How much each counter grew since `before`, once every counter in `want` grew at least
    that much (the router reads the engines' counters every few seconds) or `timeout_s` ran
    out."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = counts(cluster)
        delta = {k: now[k] - before[k] for k in now}
        if all(delta[k] >= v for k, v in want.items()) or time.monotonic() > deadline:
            return delta
        time.sleep(1)


@contextmanager
def decode_engine_stopped() -> Iterator[None]:
    """SIGSTOP the decode engine's processes (EngineCore and workers) for the block; a
    stalled decode engine: a long GC pause, a noisy neighbour, a slow node."""
    procs = [p for core, workers in pool_engines(Scope(RAY_PORT_KV), "decode")
             for p in (core, *workers)]  # fmt: skip
    assert procs, "no decode engine process found"
    for p in procs:
        p.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for p in procs:
            with suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGCONT)


def test_healthy_handoffs_pass_their_check(kv_cluster: Cluster, reference: openai.OpenAI) -> None:
    # Prompts ending mid-block and on a block boundary (128 tokens per CPU block).
    prompts = [tokens(100 + i, n) for i, n in enumerate((130, 256, 300, 1000))]
    want = [reference_text(reference, p) for p in prompts]
    before = counts(kv_cluster)
    for prompt, text in zip(prompts, want, strict=True):
        got, decision = complete(kv_cluster, prompt, verify=True)
        assert got == text
        assert decision.get("kv_verify") is True and "recomputed" not in decision, decision
    delta = grown(kv_cluster, before, {"checks": len(prompts)})
    assert delta["checks"] == len(prompts), delta
    assert all(delta[r] == 0 for r in ("digest", "identity", "stale", "unverifiable")), delta


def test_a_handoff_corrupted_before_the_pull_is_recomputed(
    kv_cluster: Cluster, reference: openai.OpenAI, faults: Faults
) -> None:
    on, off = tokens(200, 700), tokens(201, 700)
    want_on, want_off = reference_text(reference, on), reference_text(reference, off)
    before = counts(kv_cluster)
    faults.set("corrupt_kv")  # the prefill engine overwrites the blocks after its digest
    got, decision = complete(kv_cluster, on, verify=True)
    assert got == want_on
    assert decision["recomputed"] == "integrity:digest", decision
    assert grown(kv_cluster, before, {"digest": 1})["digest"] == 1
    # The same corruption, unchecked: decoded from the overwritten blocks.
    got_off, decision_off = complete(kv_cluster, off, verify=False)
    assert "recomputed" not in decision_off and "kv_verify" not in decision_off
    assert got_off != want_off, "the corruption did not change the output: the case proves nothing"


def _stale_case(
    cluster: Cluster, reference: openai.OpenAI, seed: int, verify: bool
) -> tuple[list[tuple[str, dict[str, Any]]], list[str], list[str], list[str]]:
    """Two prompts prefill while the decode engine is stopped; their lease runs out; more long
    prompts fill the prefill engine's KV cache (reusing the freed blocks); then the decode
    engine resumes. Returns the two results, their references, the fillers' texts and theirs."""
    targets = [tokens(seed + i, 1000) for i in range(2)]
    fillers = [tokens(seed + 10 + i, 1100) for i in range(6)]  # 54 blocks > the cache's 48
    want = [reference_text(reference, p) for p in targets]
    want_fillers = [reference_text(reference, p) for p in fillers]
    with ThreadPoolExecutor(len(targets) + len(fillers)) as pool:
        with decode_engine_stopped():
            held = [pool.submit(complete, cluster, p, verify) for p in targets]
            time.sleep(LEASE_S + 3)  # prefilled within a second; then the lease runs out
            filling = [pool.submit(complete, cluster, p, verify) for p in fillers]
            time.sleep(4)  # the fillers prefill into the freed blocks
        results = [f.result() for f in held]
        filled = [f.result()[0] for f in filling]
    return results, want, filled, want_fillers


def test_a_handoff_whose_lease_ran_out_is_recomputed(
    kv_cluster: Cluster, reference: openai.OpenAI
) -> None:
    before = counts(kv_cluster)
    results, want, filled, want_fillers = _stale_case(kv_cluster, reference, 300, verify=True)
    assert [text for text, _ in results] == want
    assert [d.get("recomputed") for _, d in results] == ["integrity:stale"] * 2, results
    assert filled == want_fillers  # pulled within their lease, checked, used
    delta = grown(kv_cluster, before, {"stale": 2})
    assert delta["stale"] == 2 and delta["digest"] == 0, delta
    # Unchecked, the decode engine reads blocks that hold the fillers' KV by then.
    before = counts(kv_cluster)
    results, want, _, _ = _stale_case(kv_cluster, reference, 400, verify=False)
    assert any(text != w for (text, _), w in zip(results, want, strict=True)), (
        "no stale read changed an output: the fillers did not reuse the freed blocks"
    )
    # vLLM's producer saw the late pulls: the metric pdserve exports for them.
    assert grown(kv_cluster, before, {"after_expiry": 1})["after_expiry"] >= 1


def test_swapped_handoffs_are_caught_by_their_identity(
    kv_cluster: Cluster, reference: openai.OpenAI, faults: Faults
) -> None:
    # Same length: a swapped pull lines up block for block, so only the identity tells.
    pairs = {
        True: [tokens(500, 640), tokens(501, 640)],
        False: [tokens(502, 640), tokens(503, 640)],
    }
    want = {k: [reference_text(reference, p) for p in v] for k, v in pairs.items()}
    faults.set("swap_handoffs")  # the router pairs two concurrent handoffs and swaps them
    before = counts(kv_cluster)
    with ThreadPoolExecutor(2) as pool:
        checked = list(pool.map(lambda p: complete(kv_cluster, p, True), pairs[True]))
    assert [text for text, _ in checked] == want[True]
    assert [d.get("recomputed") for _, d in checked] == ["integrity:identity"] * 2, checked
    assert grown(kv_cluster, before, {"identity": 2})["identity"] == 2
    with ThreadPoolExecutor(2) as pool:
        unchecked = list(pool.map(lambda p: complete(kv_cluster, p, False), pairs[False]))
    wrong = [text != w for (text, _), w in zip(unchecked, want[False], strict=True)]
    assert all(wrong), f"a swapped handoff decoded into its own answer: {unchecked}"
