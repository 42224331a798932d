"""`pdserve top`: the decode streams' stall on prefill-carrying steps and the ITL guard's
verdicts over the window, from constructed /metrics expositions (no network)."""

from __future__ import annotations

import pytest
from rich.console import Console

from pdserve.messages import SECONDS_BUCKETS, BucketCounts
from pdserve.router.metrics import RouterMetrics
from pdserve.top.model import build_view
from pdserve.top.render import render
from pdserve.top.scrape import Scrape, parse_metrics
from pdserve.top.stall import DecodeStall, decode_stall, guard_verdicts
from pdserve.top.window import ScrapeWindow, delta

BOUNDS = ("0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "+Inf")


def _histogram(name: str, labels: str, per_bucket: dict[str, float], total_s: float) -> str:
    """A histogram's exposition lines from per-bucket (not cumulative) counts."""
    lines, running = [f"# TYPE {name} histogram"], 0.0
    sep = "," if labels else ""
    for le in BOUNDS:
        running += per_bucket.get(le, 0.0)
        lines.append(f'{name}_bucket{{{labels}{sep}le="{le}"}} {running}')
    lines += [f"{name}_count{{{labels}}} {running}", f"{name}_sum{{{labels}}} {total_s}"]
    return "\n".join(lines)


def _exposition(
    stall: dict[str, float], stall_s: float, guard: dict[str, float], itl: dict[str, float]
) -> str:
    """The router's three series: the decode pool's stall histogram (plus a prefill pool's,
    which the decode line must ignore), the guard counter by verdict, the client-side ITL."""
    stall_name = "pdserve_decode_stall_seconds"
    parts = [
        _histogram(stall_name, 'pool="decode"', stall, stall_s),
        _histogram(stall_name, 'pool="prefill"', {"2.5": 500.0}, 1000.0),
        "# TYPE pdserve_itl_guard_decisions_total counter",
        *(f'pdserve_itl_guard_decisions_total{{verdict="{v}"}} {n}' for v, n in guard.items()),
        _histogram("pdserve_inter_token_latency_seconds", "", itl, 0.0),
    ]
    return "\n".join(parts) + "\n"


def _scrape(t_s: float, text: str) -> Scrape:
    return Scrape(t_s, parse_metrics(text))


# Before the window: 100 stalls of ~2 s and 5 "worth" verdicts, a lifetime the window excludes.
BEFORE = _exposition({"2.5": 100.0}, 200.0, {"worth": 5.0}, {"0.05": 50.0})
# 10 s later: 36 stream-steps stalled ~80 ms and 4 stalled ~400 ms (4.48 stream-seconds); the
# guard said worth 12 more times and not_worth 3 times (a verdict first seen in the window).
AFTER = _exposition(
    {"2.5": 100.0, "0.1": 36.0, "0.5": 4.0},
    200.0 + 36 * 0.08 + 4 * 0.4,
    {"worth": 17.0, "not_worth": 3.0},
    {"0.05": 150.0, "0.1": 10.0},
)


def _window() -> ScrapeWindow:
    window = ScrapeWindow(30)
    window.add(_scrape(0.0, BEFORE))
    window.add(_scrape(10.0, AFTER))
    return window


def test_stall_rate_p99_and_verdicts_over_the_window() -> None:
    stall = decode_stall(delta(_scrape(0.0, BEFORE), _scrape(10.0, AFTER)))
    assert stall is not None
    assert stall.stream_steps == pytest.approx(40)  # decode pool only, lifetime excluded
    assert stall.stalled_s == pytest.approx(4.48)
    assert stall.stall_per_s == pytest.approx(0.448)
    # rank 0.99 x 40 = 39.6: the 4th of 4 in (0.25, 0.5], 3.6/4 of the way
    assert stall.p99_s == pytest.approx(0.25 + 0.25 * 0.9)
    # ITL: 100 gaps <= 50 ms, 10 in (50, 100] ms; rank 108.9 -> 50 + 50 x 8.9/10 ms
    assert stall.itl_p99_s == pytest.approx(0.0945)
    assert stall.verdicts == (("worth", 12.0), ("not_worth", 3.0), ("no_headroom", 0.0))
    assert stall.count("no_headroom") == 0.0 and stall.count("worth") == 12.0


def test_no_deltas_no_stall_and_an_idle_window_shows_zeros() -> None:
    assert decode_stall(None) is None
    idle = decode_stall(delta(_scrape(0.0, BEFORE), _scrape(5.0, BEFORE)))
    assert idle is not None
    assert (idle.stream_steps, idle.stalled_s, idle.stall_per_s) == (0.0, 0.0, 0.0)
    assert idle.p99_s is None and idle.itl_p99_s is None
    assert [n for _, n in idle.verdicts] == [0.0, 0.0, 0.0] and idle.reported
    unreported = decode_stall(delta(_scrape(0.0, ""), _scrape(5.0, "")))
    assert unreported is not None and not unreported.reported
    assert unreported.stream_steps == 0.0 and unreported.stall_per_s == 0.0


def test_guard_verdicts_keep_the_known_order_and_show_unknown_ones_after() -> None:
    samples = parse_metrics(
        "# TYPE pdserve_itl_guard_decisions_total counter\n"
        'pdserve_itl_guard_decisions_total{verdict="zeta"} 1\n'
        'pdserve_itl_guard_decisions_total{verdict="no_headroom"} 2\n'
    )
    assert guard_verdicts(samples) == (
        ("worth", 0.0), ("not_worth", 0.0), ("no_headroom", 2.0), ("zeta", 1.0),
    )  # fmt: skip
    assert guard_verdicts({}) == (("worth", 0.0), ("not_worth", 0.0), ("no_headroom", 0.0))


def test_empty_span_has_no_rate() -> None:
    stall = DecodeStall(0.0, 4.0, 1.0, None, None, ())
    assert stall.stall_per_s is None and stall.count("worth") == 0.0


def _screen(window: ScrapeWindow, width: int = 80) -> str:
    console = Console(record=True, width=width)
    console.print(render(build_view(window), "http://x", 30, 2, "12:00:00"))
    return console.export_text()


def test_top_shows_the_decode_stall_and_guard_lines_in_80_columns() -> None:
    view = build_view(_window())
    assert view.decode_stall is not None and view.decode_stall.stream_steps == 40
    text = _screen(_window())
    assert "Decode stall 0.448 stream-s/s on prefill steps · p99 475.0 ms · ITL p99 94.5 ms" in text
    assert "ITL guard local prefill on decode: 12 worth, 3 not worth, 0 no headroom" in text
    assert text.index("TTFT by input bucket") < text.index("Decode stall")
    assert text.index("Decode stall") < text.index("\nKV transfer p50")
    assert text.count("ITL p99") == 1  # beside the stall, not also under TTFT


def test_top_before_two_scrapes_and_without_stall() -> None:
    one = ScrapeWindow(30)
    one.add(_scrape(0.0, BEFORE))
    text = _screen(one)
    assert "Decode stall —" in text and "ITL guard local prefill on decode: —" in text
    idle = ScrapeWindow(30)
    idle.add(_scrape(0.0, BEFORE))
    idle.add(_scrape(4.0, BEFORE))
    text = _screen(idle)
    assert "Decode stall none on prefill steps · ITL p99 —" in text
    assert "local prefill on decode: 0 worth, 0 not worth, 0 no headroom" in text
    silent = ScrapeWindow(30)  # a router whose decode engines report no stall series
    silent.add(_scrape(0.0, "# TYPE pdserve_requests_total counter\n"))
    silent.add(_scrape(4.0, "# TYPE pdserve_requests_total counter\n"))
    assert "Decode stall not reported by the decode engines · ITL p99 —" in _screen(silent)


def test_view_from_the_routers_own_stall_and_guard_series() -> None:
    """The router's registry, as its decode engines and ITL guard fill it: names, suffixes and
    labels must match what stall.py reads."""
    m = RouterMetrics()
    window = ScrapeWindow(30)
    window.add(Scrape(0.0, parse_metrics(m.render().decode())))
    engine = BucketCounts(SECONDS_BUCKETS)
    engine.observe(0.2, 3)  # one 0.2 s step that carried prefill, three streams waited on it
    engine.observe(0.04, 30)
    m.engine_histograms["pdserve_decode_stall_seconds"].fold("decode", "d1", engine.report())
    m.itl_guard.labels("worth").inc(12)
    m.itl_guard.labels("no_headroom").inc(1)
    window.add(Scrape(5.0, parse_metrics(m.render().decode())))
    stall = build_view(window).decode_stall
    assert stall is not None and stall.reported
    assert (stall.stream_steps, stall.stall_per_s) == (33, pytest.approx((0.6 + 1.2) / 5))
    assert stall.p99_s is not None and 0.1 < stall.p99_s <= 0.25
    assert stall.verdicts == (("worth", 12.0), ("not_worth", 0.0), ("no_headroom", 1.0))
