"""`pdserve bench` tables: ITL p50/p90/p99 beside TTFT in every comparison (pure, no network).

A TTFT won by prefilling on the decode engines is paid for in the streams' inter-token latency
tail (issue 52: TTFT p99 0.51x with ITL p90 1.36x and p99 1.56x). These tests build reports
whose ITL percentiles move by different factors at p50, p90 and p99, so a row that showed
the wrong percentile, or none, fails.
"""

from __future__ import annotations

import pathlib

import pytest
from rich.console import Console
from rich.table import Table

from pdserve.bench.config import BenchConfig
from pdserve.bench.models import PhaseOutcome, RequestResult
from pdserve.bench.render import ratios_table, results_table
from pdserve.bench.report import BenchReport
from pdserve.bench.report_build import build_report

BASE = (0.02, 0.03, 0.05)
"""A stream's chunk gaps at the body, shoulder and tail: 60, 35 and 5 of its 100 gaps, so its
p50, p90 and p99 are exactly these three (numpy's linear percentile)."""


def _gaps(body: float, shoulder: float, tail: float) -> tuple[float, ...]:
    return (body,) * 60 + (shoulder,) * 35 + (tail,) * 5


def _request(i: int, cls: str, ttft_s: float, gaps: tuple[float, ...]) -> RequestResult:
    return RequestResult(
        index=i, request_class=cls, start_s=0.0, e2e_s=ttft_s + sum(gaps), ttft_s=ttft_s,
        chunk_gaps_s=gaps, prompt_tokens=100, completion_tokens=len(gaps) + 1, cached_tokens=0,
        text="x",
    )  # fmt: skip


def _phase(
    name: str, round_index: int, short: tuple[float, float, float], long: tuple[float, float, float]
) -> PhaseOutcome:
    """One short and one long request; the TTFT halves when the ITL is not the base's."""
    ttft = 0.1 if (short, long) == (BASE, BASE) else 0.05
    results = (_request(0, "short", ttft, _gaps(*short)), _request(1, "long", ttft, _gaps(*long)))
    return PhaseOutcome(name, round_index, results, wall_s=1.0)


SHORT = (0.022, 0.039, 0.075)  # ITL p50 1.1x, p90 1.3x, p99 1.5x the base's
LONG = (0.02, 0.036, 0.1)  # ITL p50 1.0x, p90 1.2x, p99 2.0x
# Both classes pooled: p50 0.022 (1.1x), p90 0.039 (1.3x), p99 0.1 (2.0x).


def _rows(table: Table) -> dict[str, list[str]]:
    """The table's rows as text, by their first cell."""
    console = Console(record=True, width=200)
    console.print(table)
    rows: dict[str, list[str]] = {}
    for line in console.export_text().splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) > 1 and cells[0]:
            rows[cells[0]] = cells[1:]
    return rows


def _mixed_report(rounds: int = 1) -> BenchReport:
    cfg = BenchConfig(workload="mixed", policies=("round_robin", "pdserve"), rounds=rounds)
    phases = [_phase("round_robin", 0, BASE, BASE), _phase("pdserve", 0, SHORT, LONG)]
    if rounds == 2:  # round 1: pdserve's streams as fast as round-robin's
        phases += [_phase("round_robin", 1, BASE, BASE), _phase("pdserve", 1, BASE, BASE)]
    return build_report(cfg, "m", None, phases, interrupted=False)


def test_ratios_give_itl_p50_p90_p99_under_ttft_for_all_and_each_class() -> None:
    report = _mixed_report()
    ratios = report.ratios["pdserve/round_robin"]
    assert [ratios[f] for f in ("itl_p50_s", "itl_p90_s", "itl_p99_s")] == pytest.approx(
        [1.1, 1.3, 2.0]
    )
    assert ratios["classes"]["short"]["itl_p90_s"] == pytest.approx(1.3)
    assert ratios["classes"]["long"]["itl_p99_s"] == pytest.approx(2.0)
    table = ratios_table(report)
    assert table is not None
    rows = _rows(table)
    labels = list(rows)
    assert labels[:5] == ["TTFT p50", "TTFT p99", "ITL p50", "ITL p90", "ITL p99"]
    assert rows["TTFT p99"] == ["0.500"]
    assert (rows["ITL p50"], rows["ITL p90"], rows["ITL p99"]) == (["1.10"], ["1.30"], ["2.00"])
    for cls, expected in (("short", ("1.10", "1.30", "1.50")), ("long", ("1.00", "1.20", "2.00"))):
        got = tuple(rows[f"ITL {p} ({cls})"][0] for p in ("p50", "p90", "p99"))
        assert got == expected, cls
        at = labels.index(f"TTFT p99 ({cls})")  # the class's ITL right under its TTFT
        assert labels[at + 1 : at + 4] == [f"ITL {p} ({cls})" for p in ("p50", "p90", "p99")]


def test_each_rounds_itl_ratio_is_given_per_class_and_shown_as_a_range() -> None:
    report = _mixed_report(rounds=2)
    rounds = report.ratios["pdserve/round_robin"]["rounds"]
    assert rounds["itl_p90_s"] == pytest.approx([1.3, 1.0])
    assert rounds["short:itl_p90_s"] == pytest.approx([1.3, 1.0])
    assert rounds["long:itl_p99_s"] == pytest.approx([2.0, 1.0])
    table = ratios_table(report)
    assert table is not None
    rows = _rows(table)
    assert rows["ITL p90 (short)"][0].endswith("(1.00–1.30)"), rows
    assert rows["ITL p99 (long)"][0].endswith("(1.00–2.00)"), rows


def test_results_table_has_itl_percentiles_beside_ttft_in_every_column() -> None:
    rows = _rows(results_table(_mixed_report()))
    # columns: round_robin all, short, long; pdserve all, short, long
    assert rows["ITL p90 (s)"] == ["0.0300", "0.0300", "0.0300", "0.0390", "0.0390", "0.0360"]
    assert rows["ITL p99 (s)"][3:] == ["0.100", "0.0750", "0.100"]
    labels = list(rows)
    assert labels.index("ITL p50 (s)") == labels.index("TTFT p99 (s)") + 1


def test_trace_and_deployment_comparisons_have_the_itl_rows_without_classes(
    tmp_path: pathlib.Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("")
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text("{}\n")
    configs = (
        BenchConfig(workload="trace", trace=trace, policies=("round_robin", "pdserve")),
        BenchConfig(
            workload="synthetic",
            deployments=(f"1p1d={tmp_path / 'a.yaml'}", f"2p1d={tmp_path / 'b.yaml'}"),
        ),
    )
    for cfg in configs:
        first, second = cfg.phase_names
        phases = [
            PhaseOutcome(first, 0, (_request(0, "trace", 0.1, _gaps(*BASE)),), 1.0),
            PhaseOutcome(second, 0, (_request(0, "trace", 0.05, _gaps(*SHORT)),), 1.0),
        ]
        table = ratios_table(build_report(cfg, "m", None, phases, interrupted=False))
        assert table is not None
        rows = _rows(table)
        assert [rows[f"ITL {p}"] for p in ("p50", "p90", "p99")] == [["1.10"], ["1.30"], ["1.50"]]
        assert not any("(" in label for label in rows), rows  # no per-class rows
