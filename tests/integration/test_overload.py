"""Admission on the real cluster: with the router full (deploy/local.yaml admits 32 requests),
one more gets an OpenAI-format 429 with Retry-After at once, counted by reason; once the
streams end, the cluster serves again."""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words


async def _hold_streams(
    cluster: Cluster, count: int, opened: asyncio.Event, release: asyncio.Event
) -> list[int]:
    """Open `count` long streams, set `opened` once each has sent a first event, keep them
    open until `release` is set; returns their HTTP statuses."""
    started = asyncio.Semaphore(0)
    statuses: list[int] = []

    async def one(http: httpx.AsyncClient, i: int) -> None:
        body = {
            "model": "pdserve-demo",
            "prompt": text_of_words(20, salt=4200 + i),
            "max_tokens": 3000,
            "ignore_eos": True,
            "stream": True,
        }
        async with http.stream("POST", "/v1/completions", json=body) as resp:
            statuses.append(resp.status_code)
            # Not `break` out of `async for`: that closes the generator and the connection.
            lines = resp.aiter_lines()
            while not (await anext(lines)).startswith("data: {"):
                pass
            started.release()
            await release.wait()  # closing the stream aborts the engine request

    async with httpx.AsyncClient(base_url=cluster.url, timeout=60) as http:
        tasks = [asyncio.create_task(one(http, i)) for i in range(count)]
        for _ in range(count):
            await asyncio.wait_for(started.acquire(), 60)
        opened.set()
        await release.wait()
        await asyncio.gather(*tasks)
    return statuses


def test_a_full_router_answers_429_at_once_then_serves_again(cluster: Cluster) -> None:
    limit = cluster.config.router.admission.max_inflight_requests
    assert limit is not None and limit <= 64, "the local config bounds the router"
    rejected_before = cluster.metric(
        "pdserve_requests_rejected_total", {"reason": "router_inflight"}
    )

    async def scenario() -> tuple[list[int], httpx.Response, float]:
        opened, release = asyncio.Event(), asyncio.Event()
        holder = asyncio.create_task(_hold_streams(cluster, limit, opened, release))
        try:
            await asyncio.wait(
                [holder, asyncio.create_task(opened.wait())], return_when="FIRST_COMPLETED"
            )
            if holder.done():
                holder.result()  # a stream failed before all were open: show why
            async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as http:
                t0 = time.monotonic()
                extra = await http.post(
                    "/v1/completions",
                    json={"model": "pdserve-demo", "prompt": "one too many", "max_tokens": 4},
                )
                latency_s = time.monotonic() - t0
        finally:
            release.set()
        return await holder, extra, latency_s

    statuses, extra, latency_s = asyncio.run(scenario())
    assert statuses == [200] * limit
    assert extra.status_code == 429, extra.text
    assert latency_s < 1.0, f"the 429 took {latency_s:.2f} s"
    assert int(extra.headers["retry-after"]) >= 1
    error = extra.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_error"
    assert "max_inflight_requests" in error["message"]
    assert (
        cluster.metric("pdserve_requests_rejected_total", {"reason": "router_inflight"})
        == rejected_before + 1
    )

    # The slots are free again: the official client is served.
    resp = cluster.client().completions.create(
        model="pdserve-demo", prompt="after the crowd", max_tokens=4, temperature=0
    )
    assert resp.usage is not None and resp.usage.completion_tokens == 4
