"""The report page of a `pdserve bench-faults` run (pure).

Per fault: what the clients saw through the fault, on one time axis with the fault's moment
and the recovery marked: requests answered per second by verdict (succeeded, fell back,
failed cleanly, lost), and each request's latency by when it was sent.

`faults_document` is the JSON form both `bench-faults --json` and the report's `data.json`
carry (times relative to the fault); `faults_page` draws from it, so `pdserve report render`
can redraw a saved run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from pdserve.bench.faults import DESCRIPTIONS, FaultRow, Outcome, verdict
from pdserve.report.charts import Event, over_time_svg, per_second
from pdserve.report.page import Chart, Page, Section

VERDICTS = ("succeeded", "fell_back", "failed_cleanly", "lost")


def faults_document(
    config: Mapping[str, Any], runs: Sequence[tuple[FaultRow, Sequence[Outcome], float]]
) -> dict[str, Any]:
    """The run as JSON: the config, the table's rows, and per fault every request's outcome
    with `started_s`/`ended_s` relative to the fault (negative: before it)."""
    return {
        "config": dict(config),
        "rows": [dataclasses.asdict(row) for row, _, _ in runs],
        "runs": [
            {
                "fault": row.fault,
                "recovered_s": row.recovered_s,
                "outcomes": [
                    {
                        **dataclasses.asdict(o),
                        "started_s": o.started_s - fault_s,
                        "ended_s": o.ended_s - fault_s,
                        "verdict": verdict(o),
                    }
                    for o in outcomes
                ],
            }
            for row, outcomes, fault_s in runs
        ],
    }


def faults_page(doc: Mapping[str, Any]) -> Page:
    sections = []
    for run in doc.get("runs", []):
        outcomes = [o for o in run["outcomes"] if not o.get("abandoned")]
        fault = run["fault"]
        origin = min((o["started_s"] for o in outcomes), default=0.0)
        events = [Event(-origin, f"fault: {fault}")]
        if run.get("recovered_s") is not None:
            events.append(Event(run["recovered_s"] - origin, "recovered"))
        end = max((o["ended_s"] - origin for o in outcomes), default=0.0)
        answered: dict[str, tuple[list[float], list[float]]] = {}
        latency: dict[str, tuple[list[float], list[float]]] = {}
        for v in VERDICTS:
            mine = [o for o in outcomes if o["verdict"] == v]
            if not mine:
                continue
            answered[v] = per_second([o["ended_s"] - origin for o in mine], end)
            latency[v] = (
                [o["started_s"] - origin for o in mine],
                [o["ended_s"] - o["started_s"] for o in mine],
            )
        counts = {v: sum(o["verdict"] == v for o in outcomes) for v in VERDICTS}
        caption = ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in counts.items())
        xlabel = "seconds from the first request"
        charts = [
            Chart(
                f"answers-{fault}",
                over_time_svg(
                    f"{fault}: requests answered per second",
                    "answers/s",
                    answered,
                    events,
                    xlabel=xlabel,
                ),
                caption=f"{len(outcomes)} requests: {caption}.",
            ),
            Chart(
                f"latency-{fault}",
                over_time_svg(
                    f"{fault}: each request's latency by send time",
                    "latency (s)",
                    latency,
                    events,
                    points=True,
                    xlabel=xlabel,
                ),
            ),
        ]
        sections.append(Section(DESCRIPTIONS.get(fault, fault), charts))
    facts = [(r["fault"], _row_fact(r)) for r in doc.get("rows", [])]
    return Page(kind="faults", title="pdserve bench-faults", sections=sections, facts=facts)


def _row_fact(row: Mapping[str, Any]) -> str:
    rec = row.get("recovered_s")
    return (
        f"{row['sent']} sent, {row['succeeded']} succeeded ({row['fell_back']} fell back), "
        f"{row['failed_cleanly']} failed cleanly, {row['lost']} lost; recovered "
        + ("never" if rec is None else f"in {rec:.1f} s")
    )
