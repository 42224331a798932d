"""The router's front door over the real request path (fake Dispatcher): API keys, the body
size limit, bounded and validated input, client priority, reused request ids, clean 5xx."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pdserve.config import AuthConfig, PdserveConfig
from pdserve.router.app import build_app
from pdserve.router.auth import AuthConfigError
from pdserve.router.metrics import RouterMetrics
from pdserve.router.observe import RouterObserver
from pdserve.router.orchestrate import Orchestrator
from pdserve.router.prepare import RequestPreparer
from pdserve.router.status import ClusterStatus
from pdserve.router.tenants.directory import Tenant, TenantDirectory, key_digest
from tests.unit.router.fakes import FakeDispatcher, StepClock, WordTokenizer, placer

MODEL = "pdserve-demo"
KEY = "sk-test-0123456789"
LONG = " ".join(f"w{i}" for i in range(300))


def client(
    dispatcher: FakeDispatcher | None = None,
    *,
    keys: frozenset[str] = frozenset(),
    protect_metrics: bool = False,
    max_request_bytes: int = 8 << 20,
    allow_client_priority: bool = False,
) -> httpx.AsyncClient:
    config = PdserveConfig.model_validate(
        {
            "router": {
                "allow_client_priority": allow_client_priority,
                "fallback": {"prefill": "fail"},  # server errors are the point here
            }
        }
    )
    d = dispatcher or FakeDispatcher()
    the_placer = placer()
    app = build_app(
        RequestPreparer(config, WordTokenizer()),
        Orchestrator(config.router, d, the_placer),
        RouterObserver(RouterMetrics(), the_placer, clock=StepClock()),
        ClusterStatus(the_placer, d),
        tenants=TenantDirectory(
            {key_digest(k): Tenant("default") for k in keys}, protect_metrics=protect_metrics
        ),
        max_request_bytes=max_request_bytes,
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://router")


COMPLETION = {"model": MODEL, "prompt": "hello there", "max_tokens": 3}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


# ---- API keys ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-key", f"Basic {KEY}", "Bearer", f"bearer{KEY}", f"Bearer {KEY}x"],
)
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("POST", "/v1/completions", COMPLETION), ("POST", "/v1/chat/completions", CHAT),
     ("GET", "/v1/models", None), ("GET", "/v1/pdserve/replicas", None)],
)  # fmt: skip
async def test_every_v1_route_needs_the_key(
    authorization: str | None, method: str, path: str, body: Any
) -> None:
    d = FakeDispatcher()
    headers = {} if authorization is None else {"authorization": authorization}
    async with client(d, keys=frozenset({KEY})) as c:
        resp = await c.request(method, path, json=body, headers=headers)
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"] == "Bearer"
    error = resp.json()["error"]
    assert error["code"] == "invalid_api_key" and error["type"] == "authentication_error"
    assert KEY not in resp.text
    assert d.prefills == [] and d.decodes == []


async def test_the_right_key_is_served_and_health_ready_metrics_stay_open() -> None:
    async with client(keys=frozenset({KEY, "sk-other"})) as c:
        for key in (KEY, "sk-other"):
            ok = await c.post(
                "/v1/completions", json=COMPLETION, headers={"authorization": f"Bearer {key}"}
            )
            assert ok.status_code == 200, ok.text
        for path in ("/health", "/ready", "/metrics"):
            assert (await c.get(path)).status_code == 200


async def test_protect_metrics_puts_metrics_behind_the_key() -> None:
    async with client(keys=frozenset({KEY}), protect_metrics=True) as c:
        assert (await c.get("/metrics")).status_code == 401
        assert (
            await c.get("/metrics", headers={"authorization": f"Bearer {KEY}"})
        ).status_code == 200
        assert (await c.get("/health")).status_code == 200


async def test_no_key_configured_means_open() -> None:
    async with client() as c:
        assert (await c.post("/v1/completions", json=COMPLETION)).status_code == 200


def test_keys_load_from_env_and_file(tmp_path: Path) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text("# rotated 2026-11\nsk-file-1\n\n  sk-file-2  \n")
    config = AuthConfig(api_key_env="MY_KEYS", api_key_file=str(key_file))
    keys = TenantDirectory.load(config, {"MY_KEYS": " sk-a, sk-b ,,"})
    assert keys.enabled
    for key in ("sk-a", "sk-b", "sk-file-1", "sk-file-2"):
        assert keys.accepts(f"Bearer {key}")
    assert not keys.accepts("Bearer # rotated 2026-11") and not keys.accepts("Bearer ")
    assert not TenantDirectory.load(AuthConfig(), {}).enabled
    assert not TenantDirectory.load(AuthConfig(), {"PDSERVE_API_KEY": " , "}).enabled
    with pytest.raises(AuthConfigError, match="cannot be read") as err:
        TenantDirectory.load(AuthConfig(api_key_file=str(tmp_path / "missing")), {})
    assert "sk-" not in str(err.value)


# ---- body size --------------------------------------------------------------------------


async def test_a_body_over_the_limit_is_a_413_declared_or_chunked() -> None:
    body = json.dumps({**COMPLETION, "prompt": "x " * 600}).encode()
    async with client(max_request_bytes=1000) as c:
        resp = await c.post(
            "/v1/completions", content=body, headers={"content-type": "application/json"}
        )
        assert resp.status_code == 413
        assert resp.json()["error"]["code"] == "request_too_large"

        async def chunks() -> AsyncIterator[bytes]:
            for i in range(0, len(body), 100):
                yield body[i : i + 100]

        resp = await c.post(
            "/v1/completions", content=chunks(), headers={"content-type": "application/json"}
        )
        assert resp.status_code == 413
        small = json.dumps(COMPLETION).encode()

        async def small_chunks() -> AsyncIterator[bytes]:
            yield small[:10]
            yield small[10:]

        resp = await c.post(
            "/v1/completions", content=small_chunks(), headers={"content-type": "application/json"}
        )
        assert resp.status_code == 200, resp.text


# ---- bounded, validated input -------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw_body", "param"),
    [
        ('{"model": "pdserve-demo", "prompt": "a \\ud800 b"}', "prompt"),
        ('{"model": "pdserve-demo", "messages": [{"role": "user", "content": "\\udfff"}]}',
         "messages[0].content"),
        ('{"model": "pdserve-demo", "prompt": "a", "stop": ["\\ud800"]}', "stop"),
        ('{"model": "pdserve-demo", "prompt": "a", "stop": ' + json.dumps(["s"] * 100) + "}",
         "stop"),
        ('{"model": "pdserve-demo", "prompt": "a", "stop": ["' + "s" * 300 + '"]}', "stop"),
        ('{"model": "pdserve-demo", "prompt": "a", "seed": ' + str(2**70) + "}", "seed"),
        ('{"model": "pdserve-demo", "prompt": "a", "repetition_penalty": Infinity}',
         "repetition_penalty"),
        ('{"model": "pdserve-demo", "prompt": "a", "temperature": NaN}', "temperature"),
        ('{"model": "pdserve-demo", "prompt": "a", "top_k": ' + str(2**64) + "}", "top_k"),
        ('{"model": "pdserve-demo", "prompt": "a", "priority": ' + str(2**70) + "}", "priority"),
        ('{"model": "pdserve-demo", "prompt": "a", "stop_token_ids": [5, 100000]}',
         "stop_token_ids"),
    ],
)  # fmt: skip
async def test_bad_input_is_a_400_naming_the_parameter(raw_body: str, param: str) -> None:
    d = FakeDispatcher()
    path = "/v1/chat/completions" if "messages" in raw_body else "/v1/completions"
    async with client(d) as c:
        resp = await c.post(path, content=raw_body, headers={"content-type": "application/json"})
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["param"] == param
        assert d.prefills == [] and d.decodes == []
        assert (await c.post("/v1/completions", json=COMPLETION)).status_code == 200


@pytest.mark.parametrize(("allowed", "expect_negative"), [(False, False), (True, True)])
async def test_client_priority_is_honoured_only_when_allowed(
    allowed: bool, expect_negative: bool
) -> None:
    d = FakeDispatcher()
    async with client(d, allow_client_priority=allowed) as c:
        body = {**COMPLETION, "prompt": LONG, "priority": -100}
        assert (await c.post("/v1/completions", json=body)).status_code == 200
    assert (d.prefills[0].priority < 0) is expect_negative


async def test_concurrent_requests_reusing_an_x_request_id_are_both_served() -> None:
    d = FakeDispatcher()
    async with client(d) as c:
        same = {"x-request-id": "dup-1"}  # two different long prompts: both prefill on p0
        a, b = await asyncio.gather(
            c.post("/v1/completions", json={**COMPLETION, "prompt": LONG}, headers=same),
            c.post("/v1/completions", json={**COMPLETION, "prompt": "x " + LONG}, headers=same),
        )
    assert (a.status_code, b.status_code) == (200, 200), (a.text, b.text)
    assert len({p.request_id for p in d.prefills}) == 2  # engine ids stay unique


async def test_a_big_prompt_is_tokenized_off_the_loop_and_served() -> None:
    async with client() as c:
        body = {**COMPLETION, "prompt": " ".join(["words"] * 3000)}  # ~18 KiB
        resp = await c.post("/v1/completions", json=body)
    assert resp.status_code == 200 and resp.json()["usage"]["prompt_tokens"] == 3000


# ---- clean 5xx -----------------------------------------------------------------------------


async def test_a_server_error_names_a_code_and_the_request_id_but_no_internals() -> None:
    secret = "RayTaskError(EngineRequestError): ray::ServeReplica pid=4242, ip=10.1.2.3"
    d = FakeDispatcher(prefill_error=RuntimeError(secret))
    async with client(d) as c:
        body = {**COMPLETION, "prompt": LONG}
        resp = await c.post("/v1/completions", json=body, headers={"x-request-id": "trace-me"})
    assert resp.status_code == 502
    error = resp.json()["error"]
    assert error == {
        "message": "the prefill failed (request trace-me); the router log has the details",
        "type": "server_error",
        "param": None,
        "code": "prefill_failed",
    }
