"""The GPU check's summary: rows, verdict and table from sample run folders (pure + tmp files)."""

from __future__ import annotations

import json
import pathlib

import pytest
from rich.console import Console
from typer.testing import CliRunner

from pdserve.bench.gpu_check.cli import app
from pdserve.bench.gpu_check.summary import Inputs, Step, load, render, summarize
from tests.unit.gpu_check.samples import (
    bench_doc,
    identity_doc,
    kv_check_doc,
    metrics_text,
    steps_lines,
)


def _run_folder(tmp_path: pathlib.Path, **docs: object) -> pathlib.Path:
    """A run folder with steps.jsonl (all ok unless `steps` given) and the given JSON docs."""
    steps = docs.pop("steps", steps_lines())
    (tmp_path / "steps.jsonl").write_text(str(steps))
    for name, doc in docs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    return tmp_path


def _text(inputs: Inputs) -> str:
    console = Console(record=True, width=160)
    render(summarize(inputs), console)
    return console.export_text()


def test_complete_run_passes_and_shows_every_number(tmp_path: pathlib.Path) -> None:
    folder = _run_folder(
        tmp_path,
        env={"gpus": "NVIDIA H100 80GB HBM3, 81559 MiB, 550.54", "vllm": "vllm 0.32.0"},
        model={"size": "gpu-check", "dtype": "bfloat16", "num_parameters": 207644160,
               "weight_bytes": 415288320, "kv_cache_bytes_per_token": 16384},
        kv_check=kv_check_doc(),
        identity=identity_doc(("identical", "identical", "near_tie")),
        bench=bench_doc(),
    )  # fmt: skip
    summary = summarize(load(folder))
    assert summary.passed, summary.failures
    text = _text(load(folder))
    for expected in (
        "PASS", "H100", "208 M", "415 MB (396.0 MiB)", "16 KiB",
        "READ 4 KiB", "READ 64 MiB", "cuda_ipc/cuda (fabric: nvlink)", "fell back to TCP", "no",
        "2/3 identical, 1 near ties (at most 2), 0 different, 0 errors", "KV handoffs counted",
        "TTFT p50 / p99", "65.0 ms", "ITL p50 / p99", "throughput", "req/s", "total", "12.0 s",
    ):  # fmt: skip
        assert expected in text, expected
    # One table, sections in pipeline order.
    assert text.index("environment") < text.index("model") < text.index("steps")
    assert (
        text.index("steps") < text.index("kv-check") < text.index("identity") < text.index("bench")
    )
    written = json.loads(json.dumps(summary.to_json()))
    assert written["passed"] is True and written["failures"] == []


@pytest.mark.parametrize(
    ("failed", "expected"),
    [
        ({"up": 1}, "step up: failed (exit 1)"),
        ({"bench": 124}, "step bench: timed out (limit 60 s)"),
        ({"identity": -1}, "step identity: skipped"),
    ],
)
def test_failed_steps_fail_the_run(
    tmp_path: pathlib.Path, failed: dict[str, int], expected: str
) -> None:
    folder = _run_folder(tmp_path, steps=steps_lines(failed), identity=identity_doc())
    summary = summarize(load(folder))
    assert not summary.passed
    assert any(f.startswith(expected) for f in summary.failures), summary.failures
    assert "FAIL" in _text(load(folder))


def test_identity_failure_fails_the_run_and_lists_the_prompt(tmp_path: pathlib.Path) -> None:
    folder = _run_folder(tmp_path, identity=identity_doc(("identical", "different")))
    summary = summarize(load(folder))
    assert summary.failures == ("identity check failed",)
    text = _text(load(folder))
    assert "p1" in text and "different: d" in text


def test_too_many_near_ties_fail(tmp_path: pathlib.Path) -> None:
    folder = _run_folder(tmp_path, identity=identity_doc(("near_tie",) * 3, max_near_ties=2))
    assert summarize(load(folder)).failures == ("identity check failed",)


def test_tcp_fallback_and_bench_errors_are_marked_but_do_not_fail(tmp_path: pathlib.Path) -> None:
    folder = _run_folder(
        tmp_path, kv_check=kv_check_doc(("tcp/eth0",)), bench=bench_doc(num_errors=1),
        identity=identity_doc(),
    )  # fmt: skip
    summary = summarize(load(folder))
    assert summary.passed
    rows = {(r.section, r.metric): r for r in summary.rows}
    assert rows[("kv-check", "fell back to TCP")].value == "YES"
    assert rows[("kv-check", "fell back to TCP")].ok is False
    assert rows[("bench", "requests")].ok is False
    assert "(1 errors)" in rows[("bench", "requests")].value


def test_missing_and_broken_files(tmp_path: pathlib.Path) -> None:
    assert summarize(load(tmp_path)).failures == (
        "no steps recorded (steps.jsonl missing or empty)",
    )
    folder = _run_folder(tmp_path)
    (folder / "bench.json").write_text("{not json")
    (folder / "steps.jsonl").write_text(steps_lines() + "garbage\n")
    failures = summarize(load(folder)).failures
    assert any(f.startswith("bench.json is not valid JSON") for f in failures)
    assert any(f.startswith("steps.jsonl line 9 unreadable") for f in failures)
    assert "identity.json missing" in failures  # the identity step ran but left nothing


def test_values_with_brackets_are_not_rich_markup() -> None:
    inputs = Inputs(steps=(Step("env", 0, 1.0),), docs={"env.json": {"note": "[red]x[/red]"}})
    assert "[red]x[/red]" in _text(inputs)


def test_summary_command_writes_json_and_sets_the_exit_code(tmp_path: pathlib.Path) -> None:
    (tmp_path / "good").mkdir()
    good = _run_folder(tmp_path / "good", identity=identity_doc())
    result = CliRunner().invoke(app, ["summary", "--dir", str(good)])
    assert result.exit_code == 0, result.output
    assert json.loads((good / "summary.json").read_text())["passed"] is True
    (tmp_path / "bad").mkdir()
    bad = _run_folder(tmp_path / "bad", steps=steps_lines({"up": 1}))
    result = CliRunner().invoke(app, ["summary", "--dir", str(bad)])
    assert result.exit_code == 1
    assert json.loads((bad / "summary.json").read_text())["failures"]


def test_kv_handoffs_timed_by_the_router(tmp_path: pathlib.Path) -> None:
    folder = _run_folder(tmp_path, identity=identity_doc())
    (folder / "metrics.txt").write_text(metrics_text(4))
    rows = {r.metric: r.value for r in summarize(load(folder)).rows if r.section == "kv (pdserve)"}
    assert rows == {
        "handoffs timed by the router": "4",
        "mean per handoff": "4.0 ms, 22.9 MiB",
        "effective bandwidth": "6.00 GB/s",
    }
    (folder / "metrics.txt").write_text(metrics_text(0))
    none = [r for r in summarize(load(folder)).rows if r.section == "kv (pdserve)"]
    assert [(r.value, r.ok) for r in none] == [("none", False)]
