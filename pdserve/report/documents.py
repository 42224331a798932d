"""Which report page a saved JSON document is, and drawing it (pure, over parsed JSON).

The commands with `--report DIR` draw their page from the document they also write with
`--json`; `pdserve report render FILE` redraws any of them later:
- a `pdserve bench` report (`BenchReport`: `workload` and `policies`);
- a `pdserve bench-overload` report (`OverloadReport`: `levels`);
- a `pdserve bench-faults` document (`runs`, from faults_page.faults_document);
- a `pdserve simulate --json` document (`compared`);
- a `pdserve sim-check` `check.json` (`ratios` and `ranks`);
- an elastic-tiers run (`python -m pdserve.bench.elastic --json`: `phases` and `changes`).
"""

from __future__ import annotations

from typing import Any, Literal

from pdserve.bench.overload import OverloadReport
from pdserve.bench.report import BenchReport
from pdserve.report.bench_page import bench_page
from pdserve.report.elastic_page import elastic_page
from pdserve.report.faults_page import faults_page
from pdserve.report.overload_page import overload_page
from pdserve.report.page import Page
from pdserve.report.predicted_page import check_page, simulate_page

DocumentKind = Literal["bench", "overload", "faults", "simulate", "check", "elastic"]


class UnknownDocument(ValueError):
    """The JSON is none of the documents a report can be drawn from."""


def document_kind(doc: Any) -> DocumentKind:
    if not isinstance(doc, dict):
        raise UnknownDocument("a report is drawn from a JSON object")
    if "policies" in doc and "workload" in doc:
        return "bench"
    if "levels" in doc:
        return "overload"
    if "runs" in doc and "rows" in doc:
        return "faults"
    if "compared" in doc:
        return "simulate"
    if "ratios" in doc and "ranks" in doc:
        return "check"
    if "phases" in doc and "changes" in doc:
        return "elastic"
    raise UnknownDocument(
        "not a pdserve bench, bench-overload, bench-faults, simulate, sim-check or elastic "
        "document "
        f"(top-level keys: {', '.join(sorted(doc)) or 'none'})"
    )


def page_of(doc: Any, measured: BenchReport | None = None) -> Page:
    """The page of `doc`; `measured`: the bench report a simulate document was checked
    against (its distributions join the page)."""
    kind = document_kind(doc)
    if kind == "bench":
        return bench_page(BenchReport.model_validate(doc))
    if kind == "overload":
        return overload_page(OverloadReport.model_validate(doc))
    if kind == "faults":
        return faults_page(doc)
    if kind == "simulate":
        return simulate_page(doc, measured)
    if kind == "elastic":
        return elastic_page(doc)
    return check_page(doc)
