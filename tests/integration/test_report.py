"""A real short `pdserve bench --compare round_robin,pdserve --report DIR` against the session
cluster (real Ray Serve, vLLM, NIXL, HTTP; the bench's own client), its report opened in
Debian's headless Chromium: both policies' TTFT and ITL CDFs rendered with their p50/p99
markers, the requests' stage timelines, no console error, a screenshot in the test artifacts."""

from __future__ import annotations

import json
import pathlib
import subprocess

from pdserve.report.browser import look
from tests.artifacts import artifact
from tests.integration.cluster import PDSERVE, Cluster


def test_a_compare_runs_report_opens_with_both_cdfs(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "report"
    args = [str(PDSERVE), "bench", "--url", cluster.url, "--compare", "round_robin,pdserve"]
    args += ["--num-requests", "16", "--concurrency", "4", "--output-tokens", "12"]
    args += ["--long-tokens", "600", "--warmup", "0", "--report", str(out)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "HTML report written to" in done.stdout
    data = json.loads((out / "data.json").read_text())
    assert list(data["policies"]) == ["round_robin", "pdserve"]
    assert all(p["num_errors"] == 0 for p in data["policies"].values())
    seen = look(out / "index.html", artifact("report-bench-compare.png"))
    assert seen.problems == [] and seen.console_errors == []
    assert seen.rendered_s < 10
    for key in ("ttft-cdf-all", "itl-cdf-all"):
        chart = seen.charts[key]
        assert (chart.p50_markers, chart.p99_markers) == (2, 2), key
        assert "round_robin: p50" in chart.text and "pdserve: p50" in chart.text
    # pdserve's own timeline of real requests: the prefill and KV transfer stages are drawn.
    timeline = seen.charts["timeline-pdserve"].text
    assert "prefill" in timeline and "decode" in timeline
