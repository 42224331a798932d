"""The report pages as documents (pure): which charts each run gets, their markers and
captions, and the CLI's redraw of a saved document. The browser tests look at them rendered."""

from __future__ import annotations

import json
import pathlib
import re

import pytest
from typer.testing import CliRunner

from pdserve.bench.faults import FaultRow, Outcome, summarize
from pdserve.bench.report import PartMeans, StepRow
from pdserve.cli import app
from pdserve.report.bench_page import bench_page
from pdserve.report.charts import MAX_CDF_POINTS, cdf_points, cdf_svg
from pdserve.report.documents import UnknownDocument, document_kind, page_of
from pdserve.report.faults_page import faults_document, faults_page
from pdserve.report.overload_page import overload_page
from pdserve.report.page import render_html
from tests.unit.report.runs import elastic_doc, overload_run, synthetic_run


def _markers(svg: str, gid: str) -> int:
    return len(re.findall(rf'id="{gid}', svg))


def test_a_compare_run_gets_both_cdfs_per_class_with_each_policys_markers() -> None:
    report = synthetic_run(("round_robin", "pdserve"), 60)
    page = bench_page(report)
    charts = {c.key: c for c in page.charts}
    for key in ("ttft-cdf-all", "itl-cdf-all", "ttft-cdf-short", "ttft-cdf-long"):
        assert _markers(charts[key].svg, "p50-marker") == 2, key
        assert _markers(charts[key].svg, "p99-marker") == 2, key
    ratio = report.ratios["pdserve/round_robin"]["ttft_p99_s"]
    assert "pdserve ÷ round_robin: p50 " in charts["ttft-cdf-all"].caption
    assert f"p99 {ratio:.2f}×" in charts["ttft-cdf-all"].caption
    assert {"ttft-over-time", "throughput-over-time", "timeline-pdserve"} <= set(charts)
    assert "errors-over-time" not in charts  # no request failed
    # The legend names each policy's percentiles, as text the page can be searched for.
    assert "pdserve: p50" in charts["ttft-cdf-all"].svg


def test_a_deployments_run_is_drawn_per_deployment() -> None:
    report = synthetic_run(("aggregated", "1p1d"), 30, deployments=True, rounds=2)
    page = bench_page(report)
    assert ("deployments", "aggregated (60 requests), 1p1d (60 requests)") in page.facts
    cdf = next(c for c in page.charts if c.key == "ttft-cdf-all")
    assert "1p1d ÷ aggregated" in cdf.caption and "aggregated: p50" in cdf.svg


def test_failed_requests_get_their_own_series_through_the_run() -> None:
    report = synthetic_run(("a", "b"), 20)
    failed = report.policies["b"].requests
    assert failed is not None
    failed[3] = failed[3].model_copy(update={"error": "HTTP 429", "ttft_s": None})
    charts = {c.key: c for c in bench_page(report).charts}
    assert charts["errors-over-time"].caption == "Failed requests in all: 1."


def test_a_cdf_of_many_samples_is_thinned_but_keeps_its_tail() -> None:
    values = [i / 1000 for i in range(100_000)]
    x, y = cdf_points(values)
    assert len(x) <= MAX_CDF_POINTS + 1000
    assert x[-1] == values[-1] and y[-1] == 1.0
    assert list(x) == sorted(x)
    # Every sample of the top 1 % is kept: the p99 marker sits on the drawn curve.
    assert sum(v >= 99.0 for v in x) == 1000


def test_the_faults_page_marks_the_fault_and_the_recovery() -> None:
    fault_s = 100.0
    outcomes = [Outcome(fault_s - 5 + i * 0.5, fault_s - 4 + i * 0.5, 200, True) for i in range(20)]
    outcomes.append(Outcome(fault_s - 0.5, fault_s + 1, 502, False, error_code="prefill_failed"))
    row = summarize("kill-prefill", 4, outcomes, fault_s, recovered_s=6.0)
    doc = faults_document({"clients": 4}, [(row, outcomes, fault_s)])
    assert json.loads(json.dumps(doc)) == doc  # JSON-ready
    assert doc["runs"][0]["outcomes"][0]["started_s"] == -5.0
    page = faults_page(doc)
    answers = next(c for c in page.charts if c.key == "answers-kill-prefill")
    assert _markers(answers.svg, "event-marker") == 2  # the fault, the recovery
    assert "fault: kill-prefill" in answers.svg and "recovered" in answers.svg
    assert answers.caption == "21 requests: 20 succeeded, 0 fell back, 1 failed cleanly, 0 lost."
    assert page.facts[0][0] == "kill-prefill" and "recovered in 6.0 s" in page.facts[0][1]
    assert isinstance(row, FaultRow)


def test_the_overload_page_shows_each_levels_answers_by_kind() -> None:
    report = overload_run()
    page = overload_page(report)
    keys = [c.key for c in page.charts]
    assert keys == ["ttft-cdf-levels", "refusal-latency", "answers-c4", "ttft-over-time-c4",
                    "answers-c64", "ttft-over-time-c64"]  # fmt: skip
    answers = next(c for c in page.charts if c.key == "answers-c64")
    assert ">rejected<" in answers.svg and ">ok<" in answers.svg
    assert "64 clients: 5 of 15 attempts refused" in page.charts[1].caption


def test_each_saved_document_is_known_by_its_shape() -> None:
    assert document_kind(synthetic_run(num_requests=3).model_dump(mode="json")) == "bench"
    assert document_kind({"levels": []}) == "overload"
    assert document_kind({"runs": [], "rows": []}) == "faults"
    assert document_kind({"compared": []}) == "simulate"
    assert document_kind({"ratios": [], "ranks": []}) == "check"
    with pytest.raises(UnknownDocument, match="top-level keys: a, b"):
        page_of({"a": 1, "b": 2})


def test_the_html_is_one_file_that_loads_nothing(tmp_path: pathlib.Path) -> None:
    html = render_html(bench_page(synthetic_run(num_requests=10)))
    assert html.startswith("<!doctype html>") and html.count("<svg") == html.count("</svg>")
    assert "<script" not in html and "<link" not in html and "<img" not in html
    refs = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert refs and all(r.startswith("#") or r == "data.json" for r in refs), refs


def test_report_render_redraws_a_saved_run_and_refuses_what_it_cannot_draw(
    tmp_path: pathlib.Path,
) -> None:
    saved = tmp_path / "run.json"
    saved.write_text(synthetic_run(num_requests=10).model_dump_json())
    out = tmp_path / "report"
    result_ = CliRunner().invoke(app, ["report", "render", str(saved), "--out", str(out)])
    assert result_.exit_code == 0, result_.output
    assert "HTML report written to" in result_.output
    assert (out / "index.html").stat().st_size > 10_000
    assert json.loads((out / "data.json").read_text())["workload"] == "mixed"
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    bad = CliRunner().invoke(app, ["report", "render", str(other), "--out", str(out)])
    assert bad.exit_code == 2 and "unknown document" in bad.output
    missing = CliRunner().invoke(app, ["report", "look", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "no report at" in missing.output


def test_the_elastic_page_marks_each_scale_event_where_it_happened() -> None:
    doc = elastic_doc()
    assert document_kind(doc) == "elastic"
    page = page_of(doc)
    charts = {c.key: c for c in page.charts}
    ttft = charts["ttft-over-time"].svg
    # Two changes of ready replicas (1→2 at 20 s, 2→1 at 70 s); target-only changes are not.
    assert _markers(ttft, "event-marker") == 2
    assert "prefill 1→2" in ttft and "prefill 2→1" in ttft
    replicas = charts["replicas-over-time"].svg
    assert "prefill ready" in replicas and "prefill target" in replicas
    assert _markers(replicas, "event-marker") == 2  # the phases' starts
    assert page.facts[0][0] == "prefill-heavy" and "100 requests" in page.facts[0][1]


def test_an_agent_run_shows_prompt_cost_by_part_and_its_cache_breaks() -> None:
    report = synthetic_run(("pdserve",), 8)
    steps = [
        StepRow(
            step=s, num_requests=4, prompt_tokens_mean=300.0 * (s + 1), cached_tokens_mean=None,
            prefill_s_mean=0.01 * (s + 1), decode_s_mean=0.2,
            parts={"system": PartMeans(cached_mean=200.0 if s else 0.0, computed_mean=0.0 if s
                                       else 200.0),
                   "tool": PartMeans(cached_mean=100.0 * s, computed_mean=100.0)},
            num_cache_breaks=1 if s == 2 else 0,
            cache_break_at=["message 1 (user)"] if s == 2 else [],
        )
        for s in range(4)
    ]  # fmt: skip
    report.policies["pdserve"] = report.policies["pdserve"].model_copy(update={"steps": steps})
    chart = next(c for c in bench_page(report).charts if c.key == "prompt-cost-pdserve")
    assert "system cached" in chart.svg and "tool computed" in chart.svg
    assert _markers(chart.svg, "event-marker") == 1 and "1 break" in chart.svg
    assert chart.caption.startswith("1 cache break (at message 1 (user))")


def test_a_chart_is_the_same_bytes_each_time_it_is_drawn() -> None:
    series = {"a": [0.1, 0.2, 0.3], "b": [0.2, 0.4]}
    first = cdf_svg("TTFT", "s", series)
    assert cdf_svg("TTFT", "s", series) == first
    assert "<dc:date>" not in first
