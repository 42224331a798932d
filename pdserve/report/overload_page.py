"""The report page of a `pdserve bench-overload` run (pure: OverloadReport in, Page out).

The served requests' TTFT CDF per load level; per level, the answers per second by kind (a
429 storm shows where it happened) and the TTFT of each served request by send time; and
how fast a refusal came beside /health, per level.
"""

from __future__ import annotations

from pdserve.bench.overload import OverloadReport
from pdserve.report.charts import Bar, cdf_svg, grouped_bars_svg, over_time_svg, per_second
from pdserve.report.page import Chart, Page, Section, fmt_ratio

KINDS = ("ok", "rejected", "5xx", "timeout", "other")


def overload_page(report: OverloadReport) -> Page:
    label = {lv.concurrency: f"{lv.concurrency} clients" for lv in report.levels}
    ttft = {
        label[lv.concurrency]: [
            a.ttft_s for a in lv.attempts or [] if a.kind == "ok" and a.ttft_s is not None
        ]
        for lv in report.levels
    }
    ratio_text = "; ".join(
        f"{key}: TTFT p99 {fmt_ratio(v.get('ttft_p99_s'))}" for key, v in report.ratios.items()
    )
    summary = [
        Chart(
            "ttft-cdf-levels",
            cdf_svg("TTFT of the served requests, per load level", "TTFT (s)", ttft),
            caption=f"Ratios: {ratio_text}." if ratio_text else "",
        ),
        Chart(
            "refusal-latency",
            grouped_bars_svg(
                "How fast a 429 came, beside GET /health (p95)",
                "seconds",
                {
                    label[lv.concurrency]: {
                        "429 p95": Bar(lv.reject_latency_p95_s),
                        "/health p95": Bar(lv.health_latency_p95_s),
                    }
                    for lv in report.levels
                },
            ),
            caption="; ".join(
                f"{label[lv.concurrency]}: {lv.num_rejected} of {lv.num_attempts} attempts "
                f"refused, 429 ÷ /health {fmt_ratio(lv.reject_to_health_p95_ratio)}"
                for lv in report.levels
            ),
        ),
    ]
    sections = [Section("Levels side by side", summary)]
    for lv in report.levels:
        attempts = lv.attempts or []
        end = max((a.start_s + a.e2e_s for a in attempts), default=0.0)
        answered = {
            kind: per_second([a.start_s + a.e2e_s for a in attempts if a.kind == kind], end)
            for kind in KINDS
            if any(a.kind == kind for a in attempts)
        }
        ok = [a for a in attempts if a.kind == "ok" and a.ttft_s is not None]
        name = label[lv.concurrency]
        charts = [
            Chart(
                f"answers-c{lv.concurrency}",
                over_time_svg(f"{name}: answers per second by kind", "answers/s", answered),
            ),
            Chart(
                f"ttft-over-time-c{lv.concurrency}",
                over_time_svg(
                    f"{name}: TTFT of each served request by send time",
                    "TTFT (s)",
                    {"served": ([a.start_s for a in ok], [a.ttft_s or 0.0 for a in ok])},
                    points=True,
                ),
            ),
        ]
        sections.append(Section(f"{name}", charts))
    facts = [
        ("endpoint", f"{report.url} ({report.model})"),
        ("checks", ", ".join(f"{c.name} {'ok' if c.passed else 'FAILED'}" for c in report.checks)),
    ]
    return Page(kind="overload", title="pdserve bench-overload", sections=sections, facts=facts)
