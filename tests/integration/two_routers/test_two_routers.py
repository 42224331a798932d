"""Two router replicas behind one URL on the real local cluster (issue 50, part 5), through the
official `openai` client: every router replica's own /metrics adds up to the requests sent; an
agent loop's cached share matches one router's; cache breaks are still reported (with the
stated limit: a conversation's first step on each router is not compared); one router's
process killed under load loses no request that had not reached it."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import httpx
import openai
import psutil

from pdserve.top.scrape import SampleKey, parse_metrics, sum_by, total
from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words
from tests.integration.two_routers.settings import (
    METRICS_PORTS_2R,
    NUM_ROUTERS,
    SPLIT_KEY,
    SPLIT_RPM,
)

MODEL = "pdserve-demo"
STEPS = 6
NUM_STREAMS = 8
STREAM_TOKENS = 400


def _per_router(wait_s: float = 60.0) -> dict[int, Mapping[SampleKey, float]]:
    """Each router replica's own /metrics samples, by its metrics port; waits until every
    router replica answers."""
    deadline = time.monotonic() + wait_s
    while True:
        out = {}
        for port in METRICS_PORTS_2R:
            try:
                resp = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
            except httpx.HTTPError:
                continue
            if resp.status_code == 200:
                out[port] = parse_metrics(resp.text)
        if len(out) == NUM_ROUTERS or time.monotonic() > deadline:
            return out
        time.sleep(0.5)


def _requests_by_router() -> dict[int, float]:
    return {port: total(s, "pdserve_requests_total") for port, s in _per_router().items()}


def _ask(client: openai.OpenAI, salt: int, max_tokens: int = 4) -> str:
    resp = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": text_of_words(30, salt=salt)}],
        max_tokens=max_tokens,
        temperature=0,
    )
    assert resp.choices[0].finish_reason in ("length", "stop")
    text = resp.choices[0].message.content or ""
    assert text.strip(), "an empty completion"
    return text


def test_per_router_metrics_add_up_to_the_requests_sent(routers_cluster: Cluster) -> None:
    before = _requests_by_router()
    assert len(before) == NUM_ROUTERS, f"router metrics ports answering: {sorted(before)}"
    client = routers_cluster.client()
    num_requests = 12
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: _ask(client, 7000 + i), range(num_requests)))
    after = _requests_by_router()
    served = {port: after[port] - before[port] for port in before}
    print(f"requests served per router replica (by metrics port): {served}")
    assert sum(served.values()) == num_requests


def _split_answers(samples: Mapping[SampleKey, float]) -> float:
    """Answers to tenant `split` in one router replica's samples (every status)."""
    by = sum_by(samples, "pdserve_tenant_requests_total", ("tenant",))
    return by.get(("split",), 0.0)


def test_each_router_enforces_its_share_of_a_tenants_limit(routers_cluster: Cluster) -> None:
    """docs/tenants.md: with N routers each enforces limit / N (the headers say so); the
    tenant's answers are counted per router and add up to what it sent."""
    split = openai.OpenAI(
        base_url=f"{routers_cluster.url}/v1", api_key=SPLIT_KEY, max_retries=0, timeout=60
    )
    before = {port: _split_answers(s) for port, s in _per_router().items()}
    statuses = []
    for i in range(SPLIT_RPM):
        try:
            raw = split.completions.with_raw_response.create(
                model=MODEL, prompt=text_of_words(20, salt=8100 + i), max_tokens=2
            )
            headers, status = raw.headers, raw.status_code
        except openai.RateLimitError as exc:  # one router got more than its half
            headers, status = exc.response.headers, 429
        statuses.append(status)
        assert headers["x-pdserve-tenant"] == "split"
        assert headers["x-ratelimit-limit-requests"] == str(SPLIT_RPM // NUM_ROUTERS)
    after = {port: _split_answers(s) for port, s in _per_router().items()}
    answered = {port: after[port] - before[port] for port in before}
    print(f"tenant split's answers per router replica: {answered}, statuses {statuses}")
    assert sum(answered.values()) == SPLIT_RPM
    assert statuses.count(200) >= SPLIT_RPM // NUM_ROUTERS


def _agent_loop(client: openai.OpenAI, nonce: str, stamped: bool) -> list[dict[str, Any]]:
    """A 6-step agent loop whose context grows every step (tool results appended); with
    `stamped` its system prompt carries a fresh timestamp every step (a cache break)."""
    base = f"Run {nonce}. You are a careful agent. " + text_of_words(200, salt=9301)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": base},
        {"role": "user", "content": "Task: " + text_of_words(60, salt=9302)},
    ]
    out = []
    for step in range(STEPS):
        if stamped:
            msgs[0] = {"role": "system", "content": f"Current time: {time.time():.6f}. {base}"}
        resp = client.chat.completions.create(
            model=MODEL,
            messages=msgs,  # type: ignore[arg-type]
            max_tokens=8,
            temperature=0,
            user=f"two-routers-{nonce}-{stamped}",
        )
        assert resp.usage is not None
        usage = resp.usage.model_dump()
        out.append(usage)
        msgs.append({"role": "assistant", "content": resp.choices[0].message.content or ""})
        msgs.append({"role": "tool", "content": text_of_words(120, salt=9310 + step),
                     "tool_call_id": f"call_{step}"})  # fmt: skip
    return out


def _cached_share(usages: list[dict[str, Any]]) -> float:
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    return cached / sum(u["prompt_tokens"] for u in usages)


def test_agent_loop_cached_share_matches_one_routers(
    routers_cluster: Cluster, cluster: Cluster
) -> None:
    """The same loop (same tokens) on this cluster and on the session cluster, which runs the
    same deploy/local.yaml with one router (direct ingress)."""
    nonce = uuid.uuid4().hex[:8]
    one = _cached_share(_agent_loop(cluster.client(), nonce, stamped=False))
    two = _cached_share(_agent_loop(routers_cluster.client(), nonce, stamped=False))
    print(f"agent loop cached share: one router {one:.3f}, two routers {two:.3f}")
    assert two > 0.5, "the prefix was not reused across steps"
    assert abs(two - one) <= 0.05


def test_cache_breaks_are_reported_except_each_routers_first_step(
    routers_cluster: Cluster,
) -> None:
    """Each router replica compares a step with the latest step of the conversation *it* saw:
    a conversation's first step on each router is not compared (docs/several-routers.md), every
    later step with a changed system prompt is reported as a break at the system prompt."""
    before = _per_router()
    steps = _agent_loop(routers_cluster.client(), uuid.uuid4().hex[:8], stamped=True)
    after = _per_router()
    routers_used = sum(
        total(after[p], "pdserve_requests_total") > total(before[p], "pdserve_requests_total")
        for p in after
    )
    breaks = sum(
        total(after[p], "pdserve_cache_breaks_total")
        - total(before[p], "pdserve_cache_breaks_total")
        for p in after
    )
    reported = [u["pdserve_prompt_cost"]["cache_break"] for u in steps]
    print(f"stamped loop: {routers_used} routers served it, {breaks:.0f} breaks reported")
    assert 1 <= routers_used <= NUM_ROUTERS
    assert breaks == STEPS - routers_used
    assert sum(b is not None for b in reported) == breaks
    for brk in reported:
        if brk is not None:
            assert (brk["message_index"], brk["part"]) == (0, "system")


def _router_pid(metrics_port: int) -> int:
    """The process of the router replica serving its /metrics on `metrics_port` (the Ray
    actor's worker process)."""
    for conn in psutil.net_connections(kind="tcp"):
        listening = conn.status == psutil.CONN_LISTEN and conn.laddr
        if listening and conn.laddr.port == metrics_port and conn.pid is not None:
            return conn.pid
    raise AssertionError(f"no process listens on router metrics port {metrics_port}")


def _stream(client: openai.OpenAI, salt: int, started: threading.Semaphore) -> str:
    """One long streamed completion: "ok", or what the client saw instead."""
    try:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": text_of_words(40, salt=salt)}],
            max_tokens=STREAM_TOKENS,
            temperature=0,
            stream=True,
            timeout=60,
            extra_body={"ignore_eos": True},
        )
        chunks = 0
        finish = None
        for chunk in stream:
            if chunk.choices:
                finish = chunk.choices[0].finish_reason or finish
                chunks += 1
                if chunks == 1:
                    started.release()
        # A complete stream ends with its finish reason; one cut short without an error
        # would be a lost request passed off as served.
        return "ok" if finish == "length" else f"cut after {chunks} chunks"
    except openai.APIStatusError as exc:
        return f"http {exc.status_code}"
    except (openai.APIConnectionError, httpx.HTTPError) as exc:
        return type(exc).__name__


def test_killing_one_router_loses_only_its_own_requests(routers_cluster: Cluster) -> None:
    client = routers_cluster.client()
    victim = METRICS_PORTS_2R.start
    pid = _router_pid(victim)
    assert "Router" in " ".join(psutil.Process(pid).cmdline()), psutil.Process(pid).cmdline()
    started = threading.Semaphore(0)
    with concurrent.futures.ThreadPoolExecutor(NUM_STREAMS) as pool:
        in_flight = [pool.submit(_stream, client, 8000 + i, started) for i in range(NUM_STREAMS)]
        for _ in range(NUM_STREAMS):  # every stream has its first token: all are in flight
            assert started.acquire(timeout=60)
        os.kill(pid, signal.SIGKILL)
        t_kill = time.monotonic()
        outcomes = [f.result(timeout=90) for f in in_flight]
    print(f"streams in flight at the kill: {outcomes} ({time.monotonic() - t_kill:.1f} s)")
    # What the client sees for the killed router's streams: an error, no hang and no cut
    # stream passed off as complete. The other router's streams complete.
    assert all(o == "ok" or o.startswith("http 5") or o.endswith("Error") for o in outcomes)
    assert "ok" in outcomes
    # Requests sent after the kill are served by the other router (Serve's proxy stops
    # sending to a dead replica): none lost.
    after = [_ask(client, 8100 + i, max_tokens=6) for i in range(6)]
    assert len(after) == 6
