"""`pdserve profile`: the whole command against an in-process mock router whose prefill times
follow TRUE (httpx.MockTransport, no network)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from pdserve.cli import app
from pdserve.config import parse_config
from pdserve.profiling import cli as profile_cli
from pdserve.router.policy.cost_model import CostModel
from pdserve.sim.profile import SimProfile
from tests.unit import profiling_helpers as H

REPO = pathlib.Path(__file__).resolve().parents[2]

TRUE = CostModel(fixed_overhead_s=0.015, per_token_s=4e-05, per_token_sq_s=1e-09)
LOCAL_FIXED_S = 0.006
"""The mock decode engine's fixed cost of a prompt it prefills itself (TRUE's is 0.015)."""
SERVING = {"router_queue": 0.002, "prefill_hops": 0.008, "decode_hops": 0.008}


def _router(
    status: int = 200, ready: int = 200, busy_host: bool = False, cold_tokens: int = 0
) -> httpx.MockTransport:
    """`busy_host`: every other prefill takes 4x TRUE's time, the others a quarter (a host
    whose other work comes and goes while it is profiled). `cold_tokens`: the router's cold
    local-prefill threshold: a shorter fresh prompt is prefilled on the decode engine, its
    first step LOCAL_FIXED_S plus TRUE's token terms (the mock's streams decode in no time,
    alone or beside a local prefill); a remote prefill reports every stage."""
    cache: set[tuple[int, ...]] = set()
    served = [0]

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/ready":
            return httpx.Response(ready, json={})
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        body = json.loads(request.content)
        if status != 200:
            return httpx.Response(status, json={"error": {"message": "engine exploded"}})
        ids = body["prompt"]
        cached = max((n for n in (1024, 2048) if tuple(ids[:n]) in cache), default=0)
        cache.update(tuple(ids[:n]) for n in (1024, 2048) if len(ids) >= n)
        usage = H.usage(len(ids), cached)
        if body.get("stream"):
            chunk = {"choices": [{"text": "x"}]}
            usage["usage"]["completion_tokens"] = body["max_tokens"]
            events = [chunk] * body["max_tokens"] + [usage]
            text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            headers = {**H.headers({}, None), "content-type": "text/event-stream"}
            return httpx.Response(200, text=text, headers=headers)
        if len(ids) - cached < cold_tokens:
            first = LOCAL_FIXED_S + TRUE.est_prefill_s(len(ids), 0) - TRUE.fixed_overhead_s
            timing = {"router_queue": 0.002, "decode_first_token": first, "decode_hops": 0.004}
            return httpx.Response(200, json=usage, headers=H.headers(timing, {"cached_tokens": 0}))
        timing = {
            **SERVING,
            "prefill": TRUE.est_prefill_s(len(ids) - cached, cached),
            "kv_transfer": 0.01 + 1e-6 * len(ids),
            "decode_first_token": 0.003,
        }
        if busy_host:
            served[0] += 1
            timing["prefill"] *= 4.0 if served[0] % 2 else 0.25
        return httpx.Response(200, json=usage, headers=H.headers(timing, {"cached_tokens": 0}))

    return httpx.MockTransport(handle)


def _invoke(monkeypatch: pytest.MonkeyPatch, transport: httpx.MockTransport, *args: str) -> Any:
    real = profile_cli.Profiler
    monkeypatch.setattr(profile_cli, "Profiler", lambda *a, **k: real(*a, **k, transport=transport))
    # Wide enough that no path in a message wraps (pytest-xdist's tmp paths are long).
    return CliRunner().invoke(
        app, ["profile", "--url", "http://r.test", *args], env={"COLUMNS": "1000"}
    )


def test_profile_writes_a_validated_config_and_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text((REPO / "deploy" / "local-2p1d.yaml").read_text())
    out = tmp_path / "p.json"
    args = ("--config", str(cfg), "--write", "--json", str(out), "--quick", "--repeats", "1")
    result = _invoke(monkeypatch, _router(cold_tokens=128), *args)
    assert result.exit_code == 0, result.output
    written = parse_config(yaml.safe_load(cfg.read_text())).router.routing.cost_model
    for name in ("fixed_overhead_s", "per_token_s", "per_token_sq_s"):
        assert getattr(written, name) == pytest.approx(getattr(TRUE, name), rel=1e-3)
    doc = json.loads(out.read_text())
    assert doc["model"] == "m" and doc["cost_model"] == written.model_dump()
    assert any(s["num_cached_tokens"] == 1024 for s in doc["prefill_samples"])
    assert doc["mean_abs_rel_error"]["prefill_new"] < 1e-3
    local = [(s["num_prompt_tokens"], s["batch_size"]) for s in doc["local_prefill_samples"]]
    assert local == [(32, 0), (64, 0), (96, 0), (64, 1), (64, 8), (64, 1), (64, 8)]
    assert "warning" not in result.output


def test_profile_fits_a_local_prefills_own_fixed_cost(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """The decode engine's short prompts measure their own fixed cost (LOCAL_FIXED_S), not
    the prefill pool's intercept, into the simulator profile."""
    out = tmp_path / "sim.json"
    args = ("--config", str(REPO / "deploy" / "local.yaml"), "--sim-profile", str(out))
    result = _invoke(monkeypatch, _router(cold_tokens=128), "--quick", "--repeats", "1", *args)
    assert result.exit_code == 0, result.output
    prof = SimProfile.load(out)
    assert prof.local_prefill_fixed_s == pytest.approx(LOCAL_FIXED_S, rel=0.02)
    assert prof.cost_model.fixed_overhead_s == pytest.approx(TRUE.fixed_overhead_s, rel=0.02)
    assert prof.own_prompt_fixed_s() == prof.local_prefill_fixed_s
    assert prof.local_hop_s == pytest.approx(0.002) and prof.hop_s == pytest.approx(0.004)
    text = " ".join(result.output.split())
    assert (
        "6.0 ms prefilled on its decode engine (4 joining a decode batch; alone on the engine "
        "6.0 ms), 15.0 ms on the prefill pool" in text
    )
    assert "a local prefill's hop: 2.0 ms each way (the remote-prefill path's: 4.0 ms)" in text


def test_profile_stops_when_a_short_prompt_is_not_prefilled_locally(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The config says 128 but the cluster's router prefills every prompt remotely."""
    args = ("--config", str(REPO / "deploy" / "local.yaml"), "--quick", "--repeats", "1")
    result = _invoke(monkeypatch, _router(cold_tokens=0), *args)
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "was not prefilled on the decode engine" in text and "--config" in text


def test_profile_warns_when_the_fit_misses_its_own_samples(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = _invoke(monkeypatch, _router(busy_host=True), "--quick", "--repeats", "1")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "warning: the fitted prefill model misses its own samples by" in text
    assert "profile again on a quiet host" in text
    assert "fitted decode model" not in text


@pytest.mark.parametrize(
    ("transport", "args", "code", "message"),
    [
        (_router(status=500), (), 1, "HTTP 500 from /v1/completions: engine exploded"),
        (_router(ready=503), (), 1, "answered HTTP 503"),
        (_router(), ("--write",), 2, "--write needs --config"),
    ],
)
def test_profile_errors(monkeypatch, transport, args, code, message) -> None:  # type: ignore[no-untyped-def]
    result = _invoke(monkeypatch, transport, "--quick", *args)
    assert result.exit_code == code
    assert message in " ".join(result.output.split())


def test_profile_unreachable_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    result = _invoke(monkeypatch, httpx.MockTransport(refuse), "--quick")
    assert result.exit_code == 1 and "cannot reach http://r.test" in result.output


def test_each_run_sends_new_prompts_unless_seeded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second run on the same cluster must not resend the first run's prompts (they would
    hit the prefix cache); --seed makes a run repeatable."""
    sent: list[list[int]] = []
    router = _router()

    def record(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/completions":
            sent.append(json.loads(request.content)["prompt"])
        return router.handle_request(request)

    real = profile_cli.Profiler
    transport = httpx.MockTransport(record)
    monkeypatch.setattr(profile_cli, "Profiler", lambda *a, **k: real(*a, **k, transport=transport))

    def first_prompt(*args: str) -> list[int]:
        sent.clear()
        cmd = ["profile", "--url", "http://r.test", "--quick", "--repeats", "1", *args]
        result = CliRunner().invoke(app, cmd)
        assert result.exit_code == 0, result.output
        return sent[0]

    assert first_prompt() != first_prompt()
    assert first_prompt("--seed", "7") == first_prompt("--seed", "7")
