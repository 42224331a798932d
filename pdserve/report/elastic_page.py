"""The report page of an elastic-tiers run (`python -m pdserve.bench.elastic --report DIR`;
pure, over its JSON document).

One time axis for the whole run, the phases' starts and every change of a pool's ready
replicas marked on it: each pool's ready replicas and Ray Serve's target, the TTFT of every
request by send time, and answers per second. A scale event shows where it happened in the
load, beside what it did to TTFT.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pdserve.report.charts import Event, over_time_svg, per_second
from pdserve.report.page import Chart, Page, Section, fmt_s

XLABEL = "seconds from the run's start"


def elastic_page(doc: Mapping[str, Any]) -> Page:
    phases = doc.get("phases", [])
    samples = doc.get("samples", [])
    requests = doc.get("requests", [])
    phase_events = [Event(p["start_s"], p["name"]) for p in phases]
    scale_events = []
    last: dict[str, int] = {}
    for c in doc.get("changes", []):
        if c["pool"] in last and last[c["pool"]] != c["ready"]:
            scale_events.append(Event(c["t_s"], f"{c['pool']} {last[c['pool']]}→{c['ready']}"))
        last[c["pool"]] = c["ready"]
    pools = sorted({p for s in samples for p in s["ready"]})
    replicas: dict[str, tuple[list[float], list[float]]] = {}
    for pool in pools:
        times = [s["t_s"] for s in samples]
        replicas[f"{pool} ready"] = (times, [s["ready"].get(pool, 0) for s in samples])
        replicas[f"{pool} target"] = (times, [s["target"].get(pool, 0) for s in samples])
    ttft: dict[str, tuple[list[float], list[float]]] = {}
    for name in dict.fromkeys(r["phase"] for r in requests):
        ok = [r for r in requests if r["phase"] == name and r["ok"] and r["ttft_s"] is not None]
        ttft[name] = ([r["start_s"] for r in ok], [r["ttft_s"] for r in ok])
    end = max((r["start_s"] + r["e2e_s"] for r in requests), default=0.0)
    answered = {
        "ok": per_second([r["start_s"] + r["e2e_s"] for r in requests if r["ok"]], end),
        "failed": per_second([r["start_s"] + r["e2e_s"] for r in requests if not r["ok"]], end),
    }
    charts = [
        Chart(
            "replicas-over-time",
            over_time_svg(
                "Replicas per pool: ready and Ray Serve's target",
                "replicas",
                replicas,
                phase_events,
                xlabel=XLABEL,
            ),
        ),
        Chart(
            "ttft-over-time",
            over_time_svg(
                "TTFT by send time, per phase",
                "TTFT (s)",
                ttft,
                scale_events,
                points=True,
                xlabel=XLABEL,
            ),
            caption="Dashed lines: a pool's ready replicas changed.",
        ),
        Chart(
            "answers-over-time",
            over_time_svg("Answers per second", "answers/s", answered, scale_events, xlabel=XLABEL),
        ),
    ]
    facts = [
        (
            p["name"],
            f"from {p['start_s']:.0f} s for {p['duration_s']:.0f} s: "
            f"{p['requests']} requests, {p['failed']} failed, TTFT p50 "
            f"{fmt_s(p['ttft_p50_s'])} p99 {fmt_s(p['ttft_p99_s'])}",
        )
        for p in phases
    ]
    return Page(
        kind="elastic",
        title="pdserve elastic tiers: scaling under load",
        sections=[Section("Over the run", charts)],
        facts=facts,
    )
