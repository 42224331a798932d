"""Open a report in headless Chromium, as a person would look at it (adapter over selenium).

`look(html)` loads the page from disk in Debian's Chromium (`/usr/bin/chromium`, driven by
`/usr/bin/chromedriver`; selenium is told both paths, so it never downloads a browser), waits
until every chart's `<svg>` has a size on screen, and returns what it saw: the charts by key,
the p50/p99 and event markers in each, the browser console's errors, the time from navigation
start until the charts were seen rendered, and optionally a full-page screenshot.

Needs the dev extra (selenium) and Debian's `chromium` and `chromium-driver` packages; the
project's install script (`scripts/install.sh ... dev`) installs them where it can.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

CHROMIUM = os.environ.get("PDSERVE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("PDSERVE_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    # No network here: without these Chromium's own background connections fail loudly.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1200,900",
)

_RENDERED_JS = """
const figs = [...document.querySelectorAll('figure.chart')];
return {
  now_ms: performance.now(),
  complete: document.readyState === 'complete',
  charts: figs.map(f => {
    const svg = f.querySelector('svg');
    const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    const count = gid => f.querySelectorAll('[id^="' + gid + '"]').length;
    return {key: f.dataset.chart, width: box.width, height: box.height,
            p50: count('p50-marker'), p99: count('p99-marker'), events: count('event-marker'),
            text: svg ? svg.textContent : ''};
  }),
};
"""


class BrowserUnavailable(RuntimeError):
    """Chromium, chromedriver or selenium is missing: says which and how to install it."""


@dataclass(frozen=True)
class ChartSeen:
    key: str
    width_px: float
    height_px: float
    p50_markers: int
    p99_markers: int
    event_markers: int
    text: str


@dataclass(frozen=True)
class Look:
    """What the browser showed. `rendered_s`: from navigation start to the first check that
    found every chart with a size (the check starts once the page has loaded and repeats every
    50 ms, so this is an upper bound of the render time)."""

    title: str
    charts: dict[str, ChartSeen]
    console_errors: list[str]
    rendered_s: float
    screenshot: pathlib.Path | None = None
    kind: str = ""
    problems: list[str] = field(default_factory=list)


def _driver() -> Any:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    if missing:
        raise BrowserUnavailable(
            f"not found: {', '.join(missing)} (install Debian's chromium and chromium-driver: "
            "apt-get install chromium chromium-driver)"
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        raise BrowserUnavailable("selenium is not installed (pip install -e '.[dev]')") from exc
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))


def _page_png(driver: Any, path: pathlib.Path, max_height_px: int | None) -> None:
    """The whole page, not only the window (Chrome DevTools' captureBeyondViewport), or its
    top `max_height_px` pixels."""
    import base64

    path.parent.mkdir(parents=True, exist_ok=True)
    params: dict[str, Any] = {"format": "png", "captureBeyondViewport": True}
    if max_height_px is not None:
        width = driver.execute_script("return document.documentElement.scrollWidth")
        height = driver.execute_script("return document.documentElement.scrollHeight")
        clip = {"x": 0, "y": 0, "width": width, "height": min(height, max_height_px)}
        params["clip"] = {**clip, "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", params)
    path.write_bytes(base64.b64decode(shot["data"]))


def look(
    html: pathlib.Path,
    screenshot: pathlib.Path | None = None,
    timeout_s: float = 30.0,
    max_height_px: int | None = None,
) -> Look:
    """Open `html` and wait (up to `timeout_s`) until every chart has rendered; with
    `screenshot`, save the page there as PNG (its top `max_height_px` pixels if given)."""
    driver = _driver()
    try:
        driver.get(html.resolve().as_uri())
        deadline = time.monotonic() + timeout_s
        while True:
            seen = driver.execute_script(_RENDERED_JS)
            charts = seen["charts"]
            # A loaded document only: under load, `get` can return while the page is still
            # parsed, and the charts so far would pass for all of them.
            sized = all(c["width"] > 0 and c["height"] > 0 for c in charts)
            if seen["complete"] and charts and sized:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        errors = [
            entry["message"]
            for entry in driver.get_log("browser")
            if entry.get("level") in ("SEVERE", "ERROR")
        ]
        kind = driver.execute_script(
            "const m = document.querySelector('meta[name=pdserve-report]');"
            "return m ? m.content : '';"
        )
        if screenshot is not None:
            _page_png(driver, screenshot, max_height_px)
        problems = [
            f"chart {c['key']} has no size on screen"
            for c in charts
            if not (c["width"] > 0 and c["height"] > 0)
        ]
        if not charts:
            problems.append("the page has no chart")
        if not seen["complete"]:
            problems.append(f"the page had not finished loading after {timeout_s:.0f} s")
        return Look(
            title=driver.title,
            charts={
                c["key"]: ChartSeen(
                    c["key"], c["width"], c["height"], c["p50"], c["p99"], c["events"], c["text"]
                )
                for c in charts
            },
            console_errors=errors,
            rendered_s=seen["now_ms"] / 1000.0,
            screenshot=screenshot,
            kind=kind,
            problems=problems + [f"console: {e}" for e in errors],
        )
    finally:
        driver.quit()
