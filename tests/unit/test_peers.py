"""The peer harness's pure parts: /proc parsing, scope, engine-vs-serving classification,
CPU accounting across samples (processes that start and exit), pooling, ratios, the table,
the identity comparison, the proxy's prefill leg and py-spy summaries."""

from __future__ import annotations

from typing import Any

import pytest

from pdserve.bench.peers.cpu import CpuLedger, ms_per_request
from pdserve.bench.peers.identity import Output, compare
from pdserve.bench.peers.plain import api_server_args
from pdserve.bench.peers.procs import (
    ProcRecord,
    Scope,
    classify,
    in_scope,
    names_ray_cluster,
    parse_cmdline,
    parse_stat,
)
from pdserve.bench.peers.profile import summarize
from pdserve.bench.peers.proxy import prefill_body
from pdserve.bench.peers.report import (
    PhaseResult,
    failed_phase,
    phase_from_bench,
    ratios,
    summarize_setup,
    table_lines,
)


def rec(
    pid: int,
    ppid: int,
    title: str,
    *args: str,
    ticks: int = 0,
    start: int = 1,
    env: bool = False,
    comm: str | None = None,
) -> ProcRecord:
    """A fake /proc record; `comm` defaults to the title cut to 15 chars, as the kernel does."""
    return ProcRecord(
        pid, ppid, start, comm or title.split("/")[-1][:15], (title, *args), env, ticks
    )


def by_pid(*records: ProcRecord) -> dict[int, ProcRecord]:
    return {r.pid: r for r in records}


def test_parse_stat_handles_spaces_and_parens_in_comm() -> None:
    fields = " ".join(str(i) for i in range(3, 45))  # field N holds the number N
    text = f"4242 (ray::Serve (x) y) {fields.replace('3', 'S', 1)}"
    stat = parse_stat(text)
    assert (stat.comm, stat.ppid, stat.cpu_ticks, stat.starttime_ticks) == (
        "ray::Serve (x) y",
        4,
        14 + 15,  # utime + stime
        22,
    )
    with pytest.raises(ValueError):
        parse_stat("not a stat line")


def test_parse_cmdline_splits_nul_and_set_titles() -> None:
    assert parse_cmdline(b"python\0-m\0vllm\0") == ("python", "-m", "vllm")
    titled = b"ray::ServeReplica:app:Router    "  # setproctitle pads with spaces
    assert parse_cmdline(titled) == ("ray::ServeReplica:app:Router",)


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        (("gcs_server", "--gcs_server_port=6393"), True),
        (("raylet", "--gcs-address=127.0.0.1:6393"), True),
        (("python", "dashboard.py", "--gcs-address=192.0.2.2:6393"), True),
        (("python", "-m", "ray.util.client.server", "--address=127.0.0.1:6393"), True),
        (("raylet", "--gcs-address=127.0.0.1:6390"), False),  # someone else's cluster
        (("gcs_server", "--gcs_server_port=63930"), False),
        (("python", "x.py", "--port=6393"), False),
    ],
)
def test_names_ray_cluster(cmdline: tuple[str, ...], expected: bool) -> None:
    assert names_ray_cluster(cmdline, 6393) is expected


def test_scope_takes_trees_under_roots_and_ray_cluster_processes() -> None:
    records = by_pid(
        rec(1, 0, "init"),
        rec(10, 1, "raylet", "--gcs-address=127.0.0.1:6393"),
        rec(11, 10, "ray::ServeReplica:peers:Decode"),
        rec(12, 11, "VLLM::EngineCore"),
        rec(20, 1, "raylet", "--gcs-address=127.0.0.1:6390"),  # another cluster
        rec(21, 20, "ray::ServeReplica:pdserve:Router"),
        rec(30, 1, "python", "-m", "pdserve.bench.peers"),
        rec(31, 30, "python", "-m", "vllm.entrypoints.openai.api_server"),
        rec(32, 31, "VLLM::EngineCore"),
    )
    assert in_scope(records, Scope(ray_gcs_port=6393)) == {10, 11, 12}
    assert in_scope(records, Scope(root_pids=frozenset({31}))) == {31, 32}
    # an engine re-parented to init after its replica died stays in scope once known
    orphan = {**records, 12: rec(12, 1, "VLLM::EngineCore")}
    del orphan[11]
    assert in_scope(orphan, Scope(ray_gcs_port=6393), known=frozenset({12})) == {10, 12}


def test_scope_survives_a_ppid_cycle() -> None:
    records = by_pid(rec(5, 6, "a"), rec(6, 5, "b"))
    assert in_scope(records, Scope(root_pids=frozenset({99}))) == set()


API = ("python", "-m", "vllm.entrypoints.openai.api_server")
SPAWN = ("python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()")
TRACKER = ("python", "-c", "from multiprocessing.resource_tracker import main")
ENGINE = ("VLLM::EngineCore",)
# (case, the parent's cmdline, the classified process's cmdline, expected)
CLASSIFY_CASES = [
    ("engine title", ("bash",), ENGINE, "engine"),
    ("worker of an engine", ENGINE, ("VLLM::Worker",), "engine"),
    ("spawn child of an api server", API, SPAWN, "engine"),  # engine before it renames itself
    ("spawn child of a replica", ("ray::ServeReplica:peers:Prefill",), SPAWN, "engine"),
    ("spawn child of a tool", ("python", "tool.py"), SPAWN, "serving"),
    ("resource tracker of an engine", ENGINE, TRACKER, "engine"),
    ("resource tracker of an api server", API, TRACKER, "serving"),
    ("api server", ("bash",), API, "serving"),
    ("replica actor", ("raylet",), ("ray::ServeReplica:pdserve:DecodeServer",), "serving"),
    ("router", ("raylet",), ("ray::ServeReplica:pdserve:Router",), "serving"),
    ("raylet", ("bash",), ("raylet", "--gcs-address=x:1"), "serving"),
]


@pytest.mark.parametrize(
    ("parent", "cmdline", "expected"), [pytest.param(*c[1:], id=c[0]) for c in CLASSIFY_CASES]
)
def test_classify(parent: tuple[str, ...], cmdline: tuple[str, ...], expected: str) -> None:
    records = by_pid(rec(1, 0, "init"), rec(2, 1, *parent), rec(3, 2, *cmdline))
    assert classify(3, records) == expected


def test_classify_by_truncated_comm_and_by_pdserve_env_marker() -> None:
    records = by_pid(
        rec(2, 1, "python", comm="VLLM::EngineCor"),  # kernel comm is 15 chars
        rec(3, 1, "python", "-c", "x", env=True),  # PDSERVE_ENGINE_ROLE in its environ
        rec(4, 3, "python", "-c", "y"),  # child of a marked engine
    )
    assert [classify(pid, records) for pid in (2, 3, 4)] == ["engine"] * 3
    assert classify(2, records, excluded=frozenset({2})) == "excluded"  # e.g. the load generator


def test_title_names_python_modules_and_ports() -> None:
    api = rec(2, 1, "/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--port", "8312")
    assert api.title == "vllm.entrypoints.openai.api_server :8312"
    assert rec(3, 1, "python", "-u", "/ray/log_monitor.py").title == "log_monitor.py"
    assert rec(4, 1, "ray::ProxyActor").title == "ray::ProxyActor"


def test_ledger_counts_only_the_window_and_keeps_exited_processes() -> None:
    ledger = CpuLedger(ticks_per_s=100.0)
    router = (2, 1, "ray::ServeReplica:pdserve:Router")
    ledger.sample([rec(*router, ticks=500), rec(3, 1, "VLLM::EngineCore", ticks=900)])
    ledger.open()  # the router's 5 s and the engine's 9 s before the window do not count
    helper = rec(4, 2, "python", "helper.py", ticks=30)  # born inside the window
    ledger.sample([rec(*router, ticks=520), rec(3, 1, "VLLM::EngineCore", ticks=950), helper])
    ledger.sample([rec(*router, ticks=560), rec(3, 1, "VLLM::EngineCore", ticks=1000)])  # 4 exited
    totals = ledger.totals()
    assert totals.serving_s == pytest.approx(0.6 + 0.3)  # router 60 ticks, exited helper 30
    assert totals.engine_s == pytest.approx(1.0) and totals.num_exited == 1
    assert [p.pid for p in totals.processes] == [3, 2, 4]  # largest first
    assert totals.top("serving")[0].name == "ray::ServeReplica:pdserve:Router"


def test_ledger_tells_a_reused_pid_apart() -> None:
    ledger = CpuLedger(ticks_per_s=100.0)
    ledger.sample([rec(7, 1, "a", ticks=100, start=10)])
    ledger.open()
    ledger.sample([rec(7, 1, "a", ticks=150, start=10)])
    ledger.sample([rec(7, 1, "b", ticks=20, start=99)])  # pid 7 reused by a new process
    assert ledger.totals().serving_s == pytest.approx(0.5 + 0.2)


def test_ledger_reopen_resets_the_baseline() -> None:
    ledger = CpuLedger(ticks_per_s=100.0)
    ledger.sample([rec(2, 1, "x", ticks=0)])
    ledger.open()
    ledger.sample([rec(2, 1, "x", ticks=100)])
    ledger.open()
    ledger.sample([rec(2, 1, "x", ticks=130)])
    assert ledger.totals().serving_s == pytest.approx(0.3)


def test_ms_per_request() -> None:
    assert ms_per_request(2.1, 20) == pytest.approx(105.0) and ms_per_request(1, 0) is None


def bench_json(rps: float, ttft: float, n: int = 200, errors: int = 0) -> dict[str, Any]:
    names = ("ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s")
    policy: dict[str, Any] = {k: (i + 1) * ttft for i, k in enumerate(names)}
    policy |= {"num_requests": n, "num_errors": errors, "wall_s": n / rps, "requests_per_s": rps}
    config = {"warmup": 2, "workload": "mixed", "long_fraction": 0.5}
    return {"policies": {"default": policy}, "config": config, "calibration": {"x": 1}}


def phase(setup: str, rps: float, ttft: float, serving_s: float, r: int = 0) -> PhaseResult:
    ledger = CpuLedger(ticks_per_s=100.0)
    ledger.open()
    ledger.sample(
        [rec(2, 1, "router", ticks=round(serving_s * 100)), rec(3, 2, "VLLM::Worker", ticks=50)]
    )
    return phase_from_bench(setup, r, bench_json(rps, ttft), ledger.totals(), 30.0, 10.0)


def test_phase_counts_warmup_and_calibration_requests() -> None:
    p = phase("pdserve", 8.0, 0.1, serving_s=20.6)
    assert p.num_sent_in_window == 200 + 2 * 2 + 2  # warm-up: 2 short and 2 long prompts
    assert p.serving_cpu_ms_per_request == pytest.approx(100.0)
    assert p.engine_cpu_s == pytest.approx(0.5)


def test_pooling_and_ratios() -> None:
    phases = [
        phase("ray_serve_llm", 8.0, 0.4, 20.6, 0),
        phase("ray_serve_llm", 6.0, 0.2, 20.6, 1),
        failed_phase("ray_serve_llm", 2, "engine died"),
        phase("pdserve", 10.0, 0.1, 10.3, 0),
    ]
    ray = summarize_setup("ray_serve_llm", phases[:3])
    assert ray.num_phases == 3 and ray.num_failed_phases == 1
    assert ray.requests_per_s == pytest.approx(400 / (200 / 8 + 200 / 6))  # pooled wall time
    assert ray.ttft_p50_s == pytest.approx(0.3)  # mean of per-phase p50s
    assert ray.serving_cpu_ms_per_request == pytest.approx(100.0)
    assert ray.requests_per_s_by_round == (8.0, 6.0, None)
    pds = summarize_setup("pdserve", phases[3:])
    got = ratios({"ray_serve_llm": ray, "pdserve": pds})
    assert set(got) == {"pdserve/ray_serve_llm"}
    assert got["pdserve/ray_serve_llm"]["serving_cpu_ms_per_request"] == pytest.approx(0.5)
    assert got["pdserve/ray_serve_llm"]["ttft_p50_s"] == pytest.approx(0.1 / 0.3)
    assert ratios({"ray_serve_llm": ray}) == {}  # no pdserve, nothing to divide


def test_table_has_a_row_per_setup_and_per_ratio() -> None:
    ray = summarize_setup("ray_serve_llm", [phase("ray_serve_llm", 8.0, 0.4, 20.6)])
    pds = summarize_setup("pdserve", [phase("pdserve", 10.0, 0.1, 10.3)])
    summaries = {"ray_serve_llm": ray, "pdserve": pds}
    lines = table_lines(summaries, ratios(summaries))
    assert len(lines) == 4
    assert lines[1].split()[:3] == ["ray_serve_llm", "8.00", "400"]  # req/s, TTFT p50 in ms
    assert lines[3].startswith("pdserve ÷ ray_serve_llm")
    assert "0.500" in lines[3]  # serving CPU ratio
    assert len({len(line) for line in lines}) == 1  # aligned


def out(text: str, tokens: tuple[str, ...] | None = ("a", "b"), n: int | None = 5) -> Output:
    return Output(text, tokens, n)


def test_identity_compare() -> None:
    same = compare({"a": {"p": out("ab")}, "b": {"p": out("ab")}})
    assert same.identical and same.details["p"]["compared_token_lists"]
    tokens_differ = compare({"a": {"p": out("ab", ("a", "b"))}, "b": {"p": out("ab", ("ab",))}})
    assert not tokens_differ.identical
    lengths_differ = compare({"a": {"p": out("ab", n=5)}, "b": {"p": out("ab", n=6)}})
    assert not lengths_differ.identical
    failed = compare({"a": {"p": out("ab")}, "b": {"p": Output("", None, None, error="500")}})
    assert not failed.identical
    text_only = compare({"a": {"p": out("ab", None)}, "b": {"p": out("ab")}})
    assert text_only.identical and not text_only.details["p"]["compared_token_lists"]


def test_proxy_prefill_leg() -> None:
    body = {"prompt": "hi", "max_tokens": 32, "max_completion_tokens": 32, "stream": True}
    body["stream_options"] = {"include_usage": True}
    leg = prefill_body(body)
    assert leg["max_tokens"] == 1 and leg["max_completion_tokens"] == 1
    assert leg["stream"] is False and "stream_options" not in leg
    assert leg["kv_transfer_params"]["do_remote_decode"] is True
    assert body["max_tokens"] == 32 and "kv_transfer_params" not in body  # original untouched


def test_api_server_args() -> None:
    kwargs = {"model": "/m", "enforce_eager": True, "enable_prefix_caching": False, "seed": 0}
    kwargs |= {"kv_transfer_config": {"kv_role": "kv_producer"}, "block_size": None}
    assert api_server_args(kwargs) == [
        *("--model", "/m", "--enforce-eager", "--no-enable-prefix-caching", "--seed", "0"),
        *("--kv-transfer-config", '{"kv_role": "kv_producer"}'),
    ]


def test_py_spy_summary() -> None:
    loop = "proc;<module> (a.py:1);run_forever (asyncio/base_events.py:1)"
    raw = f"{loop};handle (r.py:9) 6\n{loop};dumps (json.py:2) 4\ngarbage line"
    s = summarize(raw)
    assert s.num_samples == 10
    assert s.top_self[0].frame == "handle (r.py:9)" and s.top_self[0].share == pytest.approx(0.6)
    assert all(not f.frame.startswith("<module>") for f in s.top_inclusive)
    assert summarize("").num_samples == 0
