"""A report page: sections of charts, rendered to one self-contained HTML file.

The page has no script and loads nothing: every chart is an inline `<svg>` (charts.py), so it
opens offline and renders as soon as it is parsed. `write_report` writes `index.html` and
`data.json` (the document the page was drawn from) into a folder.
"""

from __future__ import annotations

import datetime
import json
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jinja2

REPORT_FILE = "index.html"
DATA_FILE = "data.json"


@dataclass(frozen=True)
class Chart:
    """One figure: `key` names it in the page (`data-chart`), `svg` is from charts.py."""

    key: str
    svg: str
    caption: str = ""


@dataclass(frozen=True)
class Section:
    title: str
    charts: Sequence[Chart]
    text: str = ""


@dataclass(frozen=True)
class Page:
    """One run's report. `facts`: label → value lines under the title (the command's
    settings, the verdict)."""

    kind: str
    title: str
    sections: Sequence[Section]
    facts: Sequence[tuple[str, str]] = field(default_factory=tuple)

    @property
    def charts(self) -> list[Chart]:
        return [c for s in self.sections for c in s.charts]


_TEMPLATE = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="pdserve-report" content="{{ page.kind }}">
<title>{{ page.title }}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5rem auto; max-width: 75rem;
       padding: 0 1rem; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem;
     border-bottom: 1px solid #ddd; }
dl { display: grid; grid-template-columns: max-content auto; gap: .1rem 1rem; }
dt { color: #666; } dd { margin: 0; font-family: ui-monospace, monospace; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(26rem, 1fr));
          gap: 0 1.2rem; }
figure { margin: .8rem 0; } figure svg { width: 100%; height: auto; }
figcaption { color: #444; font-size: .9rem; }
footer { color: #888; font-size: .8rem; margin-top: 2rem; }
</style></head>
<body>
<h1>{{ page.title }}</h1>
{% if page.facts %}<dl>{% for k, v in page.facts %}<dt>{{ k }}</dt><dd>{{ v }}</dd>
{% endfor %}</dl>{% endif %}
{% for section in page.sections %}<section>
<h2>{{ section.title }}</h2>
{% if section.text %}<p>{{ section.text }}</p>{% endif %}
<div class="charts">
{% for chart in section.charts %}<figure class="chart" data-chart="{{ chart.key }}">
{{ chart.svg | safe }}
{% if chart.caption %}<figcaption>{{ chart.caption }}</figcaption>{% endif %}
</figure>
{% endfor %}</div></section>
{% endfor %}
<footer>pdserve report ({{ page.kind }}), written {{ written }}; the data it was drawn from:
<a href="data.json">data.json</a>.</footer>
</body></html>
"""
)


def render_html(page: Page, written: datetime.datetime | None = None) -> str:
    when = (written or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%d %H:%M UTC")
    return _TEMPLATE.render(page=page, written=when)


def write_report(page: Page, data: Any, out_dir: pathlib.Path) -> pathlib.Path:
    """Write `index.html` and `data.json` (`data`: a JSON-ready document) into `out_dir`
    (created); returns the HTML file's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / DATA_FILE).write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
    html = out_dir / REPORT_FILE
    html.write_text(render_html(page), encoding="utf-8")
    return html


def fmt_s(seconds: float | None) -> str:
    """A latency for captions: ms under a second, else seconds; '-' for none."""
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"
