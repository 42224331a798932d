"""The measured pace on the real stack (this package's cluster sets router.routing.pace_weight
0.1 with the default cost model, which predicts this demo model's prefill many times slower
than it runs): the engines' own prefill times reach the router's policy when each prefill ends,
and its decisions compare local and remote at that pace."""

from __future__ import annotations

import json
import re

import httpx

from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words

PACE = re.compile(r"measured pace prefill x([0-9.]+), decode x([0-9.]+)")


def _complete(http: httpx.Client, prompt: str, pace: str) -> dict[str, object]:
    body = {"model": "pdserve-demo", "prompt": prompt, "max_tokens": 4, "temperature": 0}
    headers = {"x-pdserve-policy": "pdserve", "x-pdserve-pace": pace}
    resp = http.post("/v1/completions", json=body, headers=headers)
    assert resp.status_code == 200, resp.text
    decision: dict[str, object] = json.loads(resp.headers["x-pdserve-decision"])
    return decision


def test_the_engines_prefill_times_set_the_routers_pace(two_prefill: Cluster) -> None:
    with two_prefill.http(timeout_s=60) as http:
        two_prefill.wait_idle(("prefill", "decode"))
        # 600-token prompts: over the cold-token threshold, so each prefills remotely.
        decisions = [_complete(http, text_of_words(600, salt=9400 + i), "on") for i in range(4)]
        off = _complete(http, text_of_words(600, salt=9410), "off")
    paces = []
    for d in decisions:
        assert d["prefill"] is not None, d
        found = PACE.search(str(d["reason"]))
        assert found is not None, d
        paces.append(float(found.group(1)))
    # Each remote prefill took a fraction of the default model's prediction (a fifth or less
    # on this model), so the prefill pool's pace (a moving mean, weight 0.1) is under 0.9
    # after the first three here, whatever it was before (1 with nothing measured).
    assert paces[-1] < 0.9, paces
    # x-pdserve-pace: off compares on the cost model alone.
    assert off["prefill"] is not None and "measured pace" not in str(off["reason"]), off
