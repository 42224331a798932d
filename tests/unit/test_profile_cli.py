"""`pdserve profile`: the whole command against an in-process mock router whose prefill times
follow TRUE (httpx.MockTransport, no network; tests/unit/profiling_helpers.py)."""

from __future__ import annotations

import json
import pathlib

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from pdserve.cli import app
from pdserve.config import parse_config
from pdserve.profiling import cli as profile_cli
from pdserve.sim.profile import SimProfile
from tests.unit.profiling_helpers import (
    LOCAL_FIXED_S,
    REPO,
    TRUE,
    invoke_profile,
    mock_router,
)


def test_profile_writes_a_validated_config_and_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text((REPO / "deploy" / "local-2p1d.yaml").read_text())
    out = tmp_path / "p.json"
    args = ("--config", str(cfg), "--write", "--json", str(out), "--quick", "--repeats", "1")
    result = invoke_profile(monkeypatch, mock_router(cold_tokens=128), *args)
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
    result = invoke_profile(
        monkeypatch, mock_router(cold_tokens=128), "--quick", "--repeats", "1", *args
    )
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
    result = invoke_profile(monkeypatch, mock_router(cold_tokens=0), *args)
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "was not prefilled on the decode engine" in text and "--config" in text


def test_profile_warns_when_the_fit_misses_its_own_samples(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = invoke_profile(monkeypatch, mock_router(busy_host=True), "--quick", "--repeats", "1")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "warning: the fitted prefill model misses its own samples by" in text
    assert "profile again on a quiet host" in text
    assert "fitted decode model" not in text


@pytest.mark.parametrize(
    ("transport", "args", "code", "message"),
    [
        (mock_router(status=500), (), 1, "HTTP 500 from /v1/completions: engine exploded"),
        (mock_router(ready=503), (), 1, "answered HTTP 503"),
        (mock_router(), ("--write",), 2, "--write needs --config"),
    ],
)
def test_profile_errors(monkeypatch, transport, args, code, message) -> None:  # type: ignore[no-untyped-def]
    result = invoke_profile(monkeypatch, transport, "--quick", *args)
    assert result.exit_code == code
    assert message in " ".join(result.output.split())


def test_profile_unreachable_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    result = invoke_profile(monkeypatch, httpx.MockTransport(refuse), "--quick")
    assert result.exit_code == 1 and "cannot reach http://r.test" in result.output


def test_each_run_sends_new_prompts_unless_seeded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second run on the same cluster must not resend the first run's prompts (they would
    hit the prefix cache); --seed makes a run repeatable."""
    sent: list[list[int]] = []
    router = mock_router()

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
