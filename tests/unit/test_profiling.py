"""`pdserve profile`: plan, samples from headers, YAML text edit, report rows, and the whole
command against an in-process mock router (httpx.MockTransport, no network)."""

from __future__ import annotations

import json
import pathlib
import random
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from pdserve.cli import app
from pdserve.config import ConfigError, parse_config
from pdserve.profiling import cli as profile_cli
from pdserve.profiling import plan as P
from pdserve.profiling import report as R
from pdserve.profiling import samples as S
from pdserve.profiling import yaml_edit as Y
from pdserve.router.policy.cost_model import CostModel, DecodeSample, PrefillSample
from pdserve.sim.profile import SimProfile

REPO = pathlib.Path(__file__).resolve().parents[2]
FIT = CostModel(fixed_overhead_s=0.0125, per_token_s=3.5e-05, per_token_sq_s=2e-09)
ALL = P.FULL_PREFILL_TOKENS


@pytest.mark.parametrize(
    ("quick", "cap", "ctx", "min_extra", "min_prompt", "lengths", "pairs"),
    [
        (False, 3000, 8192, 0, 0, (*ALL[:5], 3000), P.FULL_CACHED_PAIRS),
        (False, 5000, 4096, 0, 0, ALL, P.FULL_CACHED_PAIRS),
        (False, 3000, 2048, 0, 0, (*ALL[:4], 2047), ((1024, 512),)),
        (False, 3000, 8192, 600, 0, (*ALL[:5], 3000), ((1024, 600), (1024, 1024), (2048, 600))),
        (False, 3000, 8192, 1024, 0, (*ALL[:5], 3000), ((1024, 1024),)),
        (True, 3000, 8192, 256, 0, (64, 512, 2048), ((1024, 512),)),
        (True, 1000, 8192, 0, 0, (64, 512, 1000), ()),
        # deploy/local.yaml's cold threshold: 64-token prompts would prefill on decode
        (False, 3000, 8192, 0, 128, (128, *ALL[1:5], 3000), P.FULL_CACHED_PAIRS),
        (True, 3000, 8192, 0, 600, (600, 2048), ((1024, 512),)),
    ],
)
def test_make_plan_caps_and_filters(quick, cap, ctx, min_extra, min_prompt, lengths, pairs) -> None:  # type: ignore[no-untyped-def]
    plan = P.make_plan(quick=quick, repeats=2, max_prompt_tokens=cap, max_model_len_tokens=ctx,
                       min_extra_tokens=min_extra, min_prompt_tokens=min_prompt)  # fmt: skip
    assert plan.prefill_tokens == lengths
    assert plan.cached_pairs == pairs
    batch = sum(b + 1 for b in plan.decode_batch_sizes) * len(plan.decode_prompt_tokens)
    per_repeat = len(lengths) + 2 * len(plan.cached_pairs) + batch
    beside = 1 if plan.local_prefill_tokens else 0  # one local prefill joins each batch
    per_repeat += len(plan.local_prefill_tokens) + beside * len(plan.decode_batch_sizes) * len(
        plan.decode_prompt_tokens
    )
    assert plan.num_requests() == P.WARMUP_REQUESTS + 2 * per_repeat


@pytest.mark.parametrize(
    ("cold", "local"), [(0, ()), (1, ()), (20, (19,)), (64, (32,)), (128, (32, 64, 96))]
)
def test_make_plan_sends_local_prefills_under_the_cold_threshold(
    cold: int, local: tuple[int, ...]
) -> None:
    plan = P.make_plan(quick=True, repeats=1, max_prompt_tokens=3000,
                       max_model_len_tokens=8192, min_prompt_tokens=cold)  # fmt: skip
    assert plan.local_prefill_tokens == local


@pytest.mark.parametrize(("repeats", "cap"), [(0, 3000), (1, 100)])
def test_make_plan_rejects(repeats: int, cap: int) -> None:
    with pytest.raises(ValueError):
        P.make_plan(quick=True, repeats=repeats, max_prompt_tokens=cap, max_model_len_tokens=8192)


def test_prompts_are_seeded_in_range_and_decode_batches_share_only_a_prefix() -> None:
    a, b = P.random_tokens(random.Random(1), 500), P.random_tokens(random.Random(1), 500)
    assert a == b and all(10 <= t < 1000 for t in a)
    prefix, prompts = P.decode_batch_prompts(random.Random(2), 4, 128)
    assert len(prefix) == 96 and all(len(p) == 128 and p[:96] == prefix for p in prompts)
    assert len({tuple(p[96:]) for p in prompts}) == 4


def _headers(timing: dict[str, float], decision: dict[str, Any] | None) -> dict[str, str]:
    out = {S.TIMING_HEADER: json.dumps(timing)}
    return out if decision is None else {**out, S.DECISION_HEADER: json.dumps(decision)}


def _usage(prompt: int, cached: int | None) -> dict[str, Any]:
    details = {} if cached is None else {"prompt_tokens_details": {"cached_tokens": cached}}
    return {"usage": {"prompt_tokens": prompt, "completion_tokens": 1, **details}}


@pytest.mark.parametrize(
    ("timing", "decision", "body", "sent", "expected"),
    [
        ({"prefill": 0.1}, {"cached_tokens": 0}, _usage(512, 0), 512, (512, 0, 0.1)),
        ({"prefill": 0.05}, {"cached_tokens": 999}, _usage(1536, 1024), 1536, (512, 1024, 0.05)),
        ({"prefill": 0.05}, {"cached_tokens": 1024}, _usage(1536, None), 1536, (512, 1024, 0.05)),
        ({"prefill": 0.02}, None, {}, 64, (64, 0, 0.02)),
        ({"kv_transfer": 0.01}, {"cached_tokens": 1024}, _usage(1124, 1024), 1124, None),
    ],
)
def test_prefill_sample_from_headers(timing, decision, body, sent, expected) -> None:  # type: ignore[no-untyped-def]
    sample = S.prefill_sample(_headers(timing, decision), body, sent)
    assert sample == (None if expected is None else PrefillSample(*expected))


@pytest.mark.parametrize(
    ("headers", "match"),
    [({}, "no x-pdserve-timing"), ({S.TIMING_HEADER: "{oops"}, "not JSON"),
     ({S.TIMING_HEADER: "[1]"}, "not a JSON object")],
)  # fmt: skip
def test_prefill_sample_rejects_bad_headers(headers: dict[str, str], match: str) -> None:
    with pytest.raises(S.ProfileError, match=match):
        S.prefill_sample(headers, {}, 10)


@pytest.mark.parametrize(
    ("first", "last", "n", "expected"),
    [(1.0, 1.63, 64, 0.01), (1.0, 1.0, 1, None), (2.0, 1.0, 3, 0.0), (0.0, 0.5, 2, 0.5)],
)
def test_tpot(first: float, last: float, n: int, expected: float | None) -> None:
    assert S.tpot_s(first, last, n) == pytest.approx(expected)


def test_decode_batch_sample_is_the_median_with_batch_total_context() -> None:
    batch = S.DecodeBatch(4, 1024, 64, (0.010, 0.012, 0.011, 0.030))
    assert batch.sample() == DecodeSample(4, 4 * 1056, pytest.approx(0.0115))
    with pytest.raises(S.ProfileError, match="no stream"):
        S.DecodeBatch(2, 128, 64, ()).sample()


@pytest.mark.parametrize(
    ("value", "text"),
    [(1e-05, "1.0e-05"), (0.0, "0.0"), (0.0213, "0.0213"), (3.456789e-08, "3.457e-08"),
     (2.0, "2.0"), (12345.0, "1.234e+04"), (0.000123456, "0.0001235")],
)  # fmt: skip
def test_format_float_is_a_pyyaml_float(value: float, text: str) -> None:
    assert Y.format_float(value) == text
    assert yaml.safe_load(f"x: {text}") == {"x": float(text)}


BASE = "platform: cpu  # top comment\nmodel:\n  max_model_len_tokens: 8192\n"
CM = "".join(f"      {k}: {Y.format_float(v)}\n" for k, v in FIT.model_dump().items())
NEW_ROUTER = "router:\n  routing:\n    cost_model:\n" + CM
CASES = {
    "no router": (BASE, BASE + NEW_ROUTER),
    "router, no routing": (
        BASE + "router:\n  port: 8000  # keep\n\n# trailing\nprefill:\n  num_replicas: 2\n",
        BASE + "router:\n  port: 8000  # keep\n  routing:\n    cost_model:\n" + CM
        + "\n# trailing\nprefill:\n  num_replicas: 2\n",
    ),
    "routing, no cost_model": (
        BASE + "router:\n  routing:\n    lanes: true  # c\n  port: 8000\n",
        BASE + "router:\n  routing:\n    lanes: true  # c\n    cost_model:\n" + CM
        + "  port: 8000\n",
    ),
    "cost_model replaced": (
        BASE + "router:\n  routing:\n    cost_model:\n      # old\n      per_token_s: 1.0\n"
        "    lanes: false\n",
        BASE + "router:\n  routing:\n    cost_model:\n" + CM + "    lanes: false\n",
    ),
    "inline cost_model": (
        BASE + "router:\n  routing:\n    cost_model: {}\n",
        BASE + "router:\n  routing:\n    cost_model:\n" + CM,
    ),
    "empty routing": (
        BASE + "router:\n  routing:\nprefill: {}\n",
        BASE + "router:\n  routing:\n    cost_model:\n" + CM + "prefill: {}\n",
    ),
    "comments after a replaced block stay after it": (
        BASE + "router:\n  routing:  # r\n    cost_model:\n      per_token_s: 1.0  # old\n"
        "\n# next\nprefill: {}\n",
        BASE + "router:\n  routing:  # r\n    cost_model:\n" + CM + "\n# next\nprefill: {}\n",
    ),
    "flow-style router becomes a block": (
        BASE + "router: {port: 8000}\n",
        BASE + "router:\n  port: 8000\n  routing:\n    cost_model:\n" + CM,
    ),
    "document start and comments before it": (
        "# head\n---\n" + BASE, "# head\n---\n" + BASE + NEW_ROUTER
    ),
    "only comments": ("# nothing yet\n", "# nothing yet\n" + NEW_ROUTER),
    "4-space indent, indented sequence": (
        "prefill:\n    cpu_cores:\n        - 0  # c\n",
        "prefill:\n    cpu_cores:\n        - 0  # c\nrouter:\n    routing:\n        cost_model:\n"
        + CM.replace("      ", "            "),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_update_config_text_edits_in_place(case: str) -> None:
    before, after = CASES[case]
    result = Y.update_config_text(before, FIT)
    assert (result.text, result.comments_kept) == (after, True)
    assert Y.update_config_text(result.text, FIT).text == result.text  # idempotent


def test_update_config_text_falls_back_to_a_dump_for_duplicate_keys() -> None:
    # PyYAML takes the last of duplicate keys; ruamel.yaml refuses them: re-dump the data.
    result = Y.update_config_text("# lost\nrouter:\n  port: 8000\nrouter:\n  port: 8001\n", FIT)
    assert not result.comments_kept and "# lost" not in result.text
    data = yaml.safe_load(result.text)
    assert data["router"]["port"] == 8001
    assert parse_config(data).router.routing.cost_model == FIT


def test_update_config_text_on_the_2p1d_config_keeps_every_comment() -> None:
    text = (REPO / "deploy" / "local-2p1d.yaml").read_text()
    result = Y.update_config_text(text, FIT, comment="fitted")
    assert result.comments_kept and result.text.startswith(text.rstrip("\n"))
    cfg = parse_config(yaml.safe_load(result.text))
    assert cfg.router.routing.cost_model == FIT and cfg.router.routing.lane_max_long_backlog_s == 8
    assert "      # fitted\n" in result.text


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("- a\n", "mapping"),
        ("router: [\n", "not valid YAML"),
        ("router:\n  port: 0\n", "port"),
        ("extra:\n  - \n    1\n", "extra"),  # a bare `- ` trips ruamel's indent guess
    ],
)
def test_update_config_text_rejects(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Y.update_config_text(text, FIT)


def test_snippet_and_write_atomic(tmp_path: pathlib.Path) -> None:
    data = yaml.safe_load(Y.snippet(FIT, comment="c"))
    assert CostModel.model_validate(data["router"]["routing"]["cost_model"]) == FIT
    path = tmp_path / "c.yaml"
    path.write_text("old")
    path.chmod(0o640)
    Y.write_atomic(path, "new\n")
    assert path.read_text() == "new\n" and path.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["c.yaml"]


@pytest.mark.parametrize(
    ("pred", "meas", "err"), [(1.5, 1.0, 0.5), (0.5, 1.0, -0.5), (0.0, 0.0, 0.0), (1.0, 0.0, None)]
)
def test_rel_error(pred: float, meas: float, err: float | None) -> None:
    assert R.rel_error(pred, meas) == (float("inf") if err is None else pytest.approx(err))


def test_report_rows_group_by_inputs_and_order() -> None:
    old = CostModel()
    samples = [PrefillSample(512, 1024, 0.03), PrefillSample(64, 0, 0.01),
               PrefillSample(64, 0, 0.03), PrefillSample(64, 0, 0.02)]  # fmt: skip
    rows = R.prefill_rows(samples, old, FIT)
    assert [(r.inputs, r.count, r.measured_s) for r in rows] == [
        ("64 new", 3, 0.02), ("512 new + 1024 cached", 1, 0.03)]  # fmt: skip
    assert rows[0].new_error == pytest.approx(FIT.est_prefill_s(64, 0) / 0.02 - 1)
    drows = R.decode_rows([DecodeSample(8, 1280, 0.02), DecodeSample(1, 160, 0.005)], old, FIT)
    assert [r.inputs for r in drows] == ["B=1, ctx=160", "B=8, ctx=1280"]
    assert R.mean_abs_error_prefill([], old) is None
    assert R.mean_abs_error_decode([DecodeSample(1, 0, 0.01)], CostModel()) == pytest.approx(0.05)


# ---- the whole command against a mock router whose prefill times follow TRUE -------------

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
        usage = _usage(len(ids), cached)
        if body.get("stream"):
            chunk = {"choices": [{"text": "x"}]}
            usage["usage"]["completion_tokens"] = body["max_tokens"]
            events = [chunk] * body["max_tokens"] + [usage]
            text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            headers = {**_headers({}, None), "content-type": "text/event-stream"}
            return httpx.Response(200, text=text, headers=headers)
        if len(ids) - cached < cold_tokens:
            first = LOCAL_FIXED_S + TRUE.est_prefill_s(len(ids), 0) - TRUE.fixed_overhead_s
            timing = {"router_queue": 0.002, "decode_first_token": first, "decode_hops": 0.004}
            return httpx.Response(200, json=usage, headers=_headers(timing, {"cached_tokens": 0}))
        timing = {
            **SERVING,
            "prefill": TRUE.est_prefill_s(len(ids) - cached, cached),
            "kv_transfer": 0.01 + 1e-6 * len(ids),
            "decode_first_token": 0.003,
        }
        if busy_host:
            served[0] += 1
            timing["prefill"] *= 4.0 if served[0] % 2 else 0.25
        return httpx.Response(200, json=usage, headers=_headers(timing, {"cached_tokens": 0}))

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
    ("error", "warns"), [(None, False), (0.06, False), (0.5, False), (0.51, True), (0.89, True)]
)
def test_noisy_fit_warning_above_half(error: float | None, warns: bool) -> None:
    warning = R.noisy_fit_warning("prefill", error)
    assert bool(warning) is warns
    if warns:
        assert f"by {error * 100:.0f}% on average" in warning  # type: ignore[operator]


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
