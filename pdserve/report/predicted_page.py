"""Report pages that put the simulator's predictions beside measured runs (pure).

- `simulate_page`: `pdserve simulate --measured` — per deployment, each latency predicted
  against measured (with the measured value's 95 % interval where the run pins one), then the
  measured run's own distributions.
- `check_page`: `pdserve sim-check` — per workload, each layout's ratio to the baseline
  layout, measured and predicted by each profile, around the 1.0 line; the layouts' order,
  measured and predicted, in the facts.
Both draw from the JSON documents those commands write (their `--json` / `check.json`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pdserve.bench.report import BenchReport
from pdserve.report.bench_page import distributions
from pdserve.report.charts import Bar, grouped_bars_svg
from pdserve.report.page import Chart, Page, Section

LATENCY_LABELS = {
    "ttft_p50_s": "TTFT p50",
    "ttft_p99_s": "TTFT p99",
    "itl_p50_s": "ITL p50",
    "itl_p99_s": "ITL p99",
    "tpot_p50_s": "TPOT p50",
    "e2e_p50_s": "E2E p50",
}


def simulate_page(doc: Mapping[str, Any], measured: BenchReport | None) -> Page:
    compared: Sequence[Mapping[str, Any]] = doc.get("compared", [])
    charts = []
    for deployment in dict.fromkeys(r["deployment"] for r in compared):
        rows = [r for r in compared if r["deployment"] == deployment]
        for scope in dict.fromkeys(r["requests"] for r in rows):
            groups: dict[str, dict[str, Bar]] = {}
            for r in rows:
                if r["requests"] != scope or r["field"] not in LATENCY_LABELS:
                    continue
                interval = r.get("measured_interval")
                low, high = interval if interval else (None, None)
                groups[LATENCY_LABELS[r["field"]]] = {
                    "predicted": Bar(r["predicted"]),
                    "measured": Bar(r["measured"], low, high),
                }
            if not groups:
                continue
            off = [
                f"{LATENCY_LABELS[r['field']]} {r['ratio']:.2f}×"
                for r in rows
                if r["requests"] == scope and r["field"] in LATENCY_LABELS and r.get("ratio")
            ]
            charts.append(
                Chart(
                    f"predicted-{deployment}-{scope}",
                    grouped_bars_svg(
                        f"{deployment}, {scope} requests: predicted vs measured", "seconds", groups
                    ),
                    caption="predicted ÷ measured: " + ", ".join(off) + "; error bars: the "
                    "measured value's 95 % interval from the run's requests.",
                )
            )
    sections = [Section("Predicted against measured", charts)]
    if measured is not None:
        sections.append(distributions(measured, list(measured.policies)))
    deployments = ", ".join(dict.fromkeys(r["deployment"] for r in compared)) or "-"
    facts = [("deployments", deployments)]
    return Page(
        kind="prediction",
        title="pdserve simulate: predicted against measured",
        sections=sections,
        facts=facts,
    )


def check_page(doc: Mapping[str, Any]) -> Page:
    ratios: Sequence[Mapping[str, Any]] = doc.get("ratios", [])
    profiles = list(doc.get("profiles", {}))
    charts = []
    for workload in dict.fromkeys(r["workload"] for r in ratios):
        groups: dict[str, dict[str, Bar]] = {}
        baseline = ""
        for r in ratios:
            if r["workload"] != workload:
                continue
            baseline = r["baseline"]
            bars = {"measured": Bar(r["measured"])}
            bars |= {f"predicted ({p})": Bar(r["predicted"].get(p)) for p in profiles}
            groups[f"{r['layout']} {r['scope']} {r['metric']}"] = bars
        charts.append(
            Chart(
                f"ratios-{workload}",
                grouped_bars_svg(
                    f"{workload}: each layout ÷ {baseline}", "ratio", groups, reference=1.0
                ),
                caption="Left of the dotted line the layout beats the baseline; the check is "
                "whether prediction and measurement fall on the same side, and how far apart.",
            )
        )
    facts = [
        (
            f"order, {r['workload']}",
            f"measured {' > '.join(r['measured'])}; "
            + "; ".join(f"predicted ({p}) {' > '.join(o)}" for p, o in r["predicted"].items()),
        )
        for r in doc.get("ranks", [])
    ]
    facts += [("deployments", ", ".join(doc.get("deployments", {})))]
    return Page(
        kind="prediction",
        title="pdserve sim-check: predicted ratios against measured",
        sections=[Section("Ratios to the baseline layout", charts)],
        facts=facts,
    )
