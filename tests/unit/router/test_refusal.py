"""Pre-parse refusals (router/refusal.py): the 429 a client sees, and its cost timed from the
request's arrival stamp with an injected clock."""

from __future__ import annotations

import json
from typing import Any

from pdserve.router.admission import AdmissionRejected
from pdserve.router.arrival import ARRIVAL_KEY, scope_arrival_s
from pdserve.router.refusal import refuse


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_a_refusal_answers_429_with_retry_after_and_times_its_response_start() -> None:
    clock = Clock(100.0)
    events: list[Any] = []

    async def send(message: dict[str, Any]) -> None:
        events.append(message["type"])
        events.append(message)
        clock.now += 0.004  # each send takes 4 ms

    exc = AdmissionRejected("router_inflight", "the router is full", 3.0)
    await refuse(send, exc, 99.99, lambda reason, s: events.append((reason, s)), clock)

    start, timed, body = events[1], events[2], events[4]
    assert events[0] == "http.response.start" and events[3] == "http.response.body"
    assert start["status"] == 429
    headers = dict(start["headers"])
    assert headers[b"retry-after"] == b"3"
    assert headers[b"content-type"] == b"application/json"
    assert int(headers[b"content-length"]) == len(body["body"])
    error = json.loads(body["body"])["error"]
    assert error["code"] == "rate_limit_exceeded" and "retry in about 3 s" in error["message"]
    # timed once the response start is handed over, before the body: 10 ms + the 4 ms send
    reason, seconds = timed
    assert reason == "router_inflight" and abs(seconds - 0.014) < 1e-9


async def test_an_unstamped_request_is_refused_but_not_timed() -> None:
    sent: list[dict[str, Any]] = []
    observed: list[tuple[str, float]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    exc = AdmissionRejected("router_inflight", "full", 1.0)
    await refuse(send, exc, None, lambda reason, s: observed.append((reason, s)))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert observed == []


def test_the_arrival_stamp_of_a_scope() -> None:
    assert scope_arrival_s({"type": "http", "state": {ARRIVAL_KEY: 12.5}}) == 12.5
    assert scope_arrival_s({"type": "http"}) is None
