"""A decode engine frozen with SIGSTOP mid-stream: the client gets an error event within the
stream idle deadline and the stream ends; once the engine thaws, the cluster serves again."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx

from tests.integration.cluster import Cluster
from tests.integration.engine_procs import engine_processes
from tests.integration.texts import text_of_words


def test_frozen_decode_engine_ends_the_stream_within_the_idle_deadline(cluster: Cluster) -> None:
    idle_s = cluster.config.router.deadlines.stream_idle_seconds
    frozen = engine_processes("decode")
    body = {
        "model": "pdserve-demo",
        "prompt": text_of_words(60, salt=90210),
        "max_tokens": 3000,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    events: list[dict[str, object]] = []
    done = False
    try:
        with (
            httpx.Client(base_url=cluster.url, timeout=idle_s + 60) as http,
            http.stream("POST", "/v1/completions", json=body) as resp,
        ):
            assert resp.status_code == 200
            lines = resp.iter_lines()
            for line in lines:
                if line.startswith("data: {"):
                    events.append(json.loads(line[6:]))
                    if len(events) == 3:
                        break
            for proc in frozen:
                os.kill(proc.pid, signal.SIGSTOP)
            frozen_at = time.monotonic()
            for line in lines:  # the router must end the stream on its own
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: {"):
                    events.append(json.loads(line[6:]))
            ended_after_s = time.monotonic() - frozen_at
    finally:
        for proc in frozen:
            os.kill(proc.pid, signal.SIGCONT)
    assert not done, "a stream cut by a frozen engine must not end with [DONE]"
    error = events[-1].get("error")
    assert isinstance(error, dict) and error["code"] == "stream_idle_timeout", events[-1]
    assert ended_after_s < idle_s + 5, f"the stream ended {ended_after_s:.1f} s after the freeze"
    assert ended_after_s > idle_s - 1 - cluster.config.router.stream_batch_interval_ms / 1000

    # Thawed, the engine has dropped the aborted request and serves new ones.
    resp = cluster.client().completions.create(
        model="pdserve-demo", prompt="after the thaw", max_tokens=4, temperature=0
    )
    assert resp.usage is not None and resp.usage.completion_tokens == 4
