"""`pdserve top`: window deltas, histogram quantiles, KV bandwidth verdicts, rows (no network)."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from pdserve.autoscaling.journal import PoolScaling, ScaleEvent
from pdserve.messages import BYTES_BUCKETS, SECONDS_BUCKETS, BucketCounts
from pdserve.router.metrics import RouterMetrics
from pdserve.top import cli as top_cli
from pdserve.top.bandwidth import (
    HINT,
    FabricPoint,
    FabricReportError,
    KvBandwidth,
    bandwidth_verdict,
    parse_fabric_report,
    reference_point,
)
from pdserve.top.model import build_view, replica_rows
from pdserve.top.poll import Poller, PollError
from pdserve.top.quantile import histogram_quantile
from pdserve.top.render import render
from pdserve.top.scrape import Scrape, parse_metrics, sum_by
from pdserve.top.units import fmt_bandwidth, fmt_bytes, fmt_ratio, fmt_seconds
from pdserve.top.window import ScrapeWindow, delta, increase

INF = math.inf
REPLICAS = {
    "pools": {
        "decode": [{"replica_id": "d1", "running": 3, "waiting": 0, "kv_cache_usage": 0.5,
                    "cached_blocks": 12, "kv_events": True}],
        "prefill": [
            {"replica_id": "p2", "running": 0, "waiting": 2, "kv_cache_usage": 0.0,
             "cached_blocks": 0, "kv_events": False},
            {"replica_id": "p1", "running": 1, "waiting": 0, "kv_cache_usage": 0.25,
             "cached_blocks": 40, "kv_events": True},
        ],
    }
}  # fmt: skip


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        (0.5, {}, None),  # no observations
        (0.5, {0.1: 3.0, 1.0: 5.0}, None),  # no +Inf bucket
        (1.5, {0.1: 3.0, INF: 3.0}, None),  # q out of range
        (0.5, {0.1: 0.0, 1.0: 0.0, INF: 0.0}, None),  # zero count
        (0.5, {0.1: 10.0, 1.0: 10.0, INF: 10.0}, 0.05),  # first bucket starts at 0
        (0.5, {0.1: 0.0, 1.0: 10.0, INF: 10.0}, 0.55),  # linear inside (0.1, 1]
        (0.99, {0.1: 50.0, 1.0: 100.0, INF: 100.0}, 0.982),
        (0.99, {0.1: 0.0, 1.0: 0.0, INF: 10.0}, 1.0),  # rank in +Inf: highest finite bound
        (0.5, {0.1: 5.0, 1.0: 3.0, INF: 10.0}, 0.1),  # non-monotonic counts are fixed up
        (0.0, {0.1: 4.0, INF: 4.0}, 0.0),
    ],
)
def test_histogram_quantile(q: float, buckets: dict[float, float], expected: float | None) -> None:
    got = histogram_quantile(q, buckets)
    assert got == pytest.approx(expected) if expected is not None else got is None


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [(None, 5.0, 5.0), (2.0, 5.0, 3.0), (5.0, 5.0, 0.0), (9.0, 4.0, 4.0)],  # last: a reset
)
def test_increase(old: float | None, new: float, expected: float) -> None:
    assert increase(old, new) == expected


@pytest.mark.parametrize(
    ("times", "window_s", "kept"),
    [
        ([0, 2, 4], 30, [0, 2, 4]),
        ([0, 2, 4, 6, 8], 4, [4, 6, 8]),  # oldest exactly at the edge stays
        ([0, 10], 4, [0, 10]),  # always the two newest, even past the window
        ([0, 1, 2, 10], 4, [2, 10]),
    ],
)
def test_window_keeps(times: list[float], window_s: float, kept: list[float]) -> None:
    window = ScrapeWindow(window_s)
    for t in times:
        window.add(Scrape(t_s=t, samples={}))
    assert [s.t_s for s in window._scrapes] == kept


def test_window_rejects_out_of_order_and_needs_two() -> None:
    window = ScrapeWindow(10)
    window.add(Scrape(5.0, {}))
    assert window.delta() is None
    with pytest.raises(ValueError):
        window.add(Scrape(4.0, {}))


def test_delta_counts_new_series_and_resets() -> None:
    a, b, c = ("x_total", (("k", "a"),)), ("x_total", (("k", "b"),)), ("x_total", (("k", "c"),))
    d = delta(Scrape(1.0, {a: 10.0, b: 7.0}), Scrape(5.0, {a: 14.0, b: 2.0, c: 3.0}))
    assert d.span_s == 4.0
    assert d.samples == {a: 4.0, b: 2.0, c: 3.0}
    assert d.rate(8.0) == 2.0


def _scrape(m: RouterMetrics, t_s: float, replicas: dict[str, Any] | None = REPLICAS) -> Scrape:
    return Scrape(t_s, parse_metrics(m.render().decode()), replicas)


class _DecodeEngine:
    """A decode engine's NIXL histograms, cumulative, as its routing stats report them."""

    def __init__(self) -> None:
        self.seconds = BucketCounts(SECONDS_BUCKETS)
        self.bytes = BucketCounts(BYTES_BUCKETS)

    def transfer(self, seconds: float, size: float) -> None:
        self.seconds.observe(seconds)
        self.bytes.observe(size)

    def reported_to(self, m: RouterMetrics) -> None:
        m.engine_histograms["pdserve_kv_transfer_seconds"].fold(
            "decode", "d1", self.seconds.report()
        )
        m.engine_histograms["pdserve_kv_transfer_bytes"].fold("decode", "d1", self.bytes.report())


def test_view_from_real_router_metrics() -> None:
    """Build scrapes from the router's own registry: names, suffixes and labels must match."""
    m = RouterMetrics()
    m.requests.labels("chat", "remote_prefill", "200").inc(100)  # lifetime, before the window
    m.ttft.labels("0-256", "remote_prefill").observe(50.0)
    m.ready_replicas.labels("prefill").set(2)
    m.ready_replicas.labels("decode").set(1)
    m.kv_cache_usage.labels("decode").set(0.5)
    window = ScrapeWindow(30)
    window.add(_scrape(m, 0.0))
    engine = _DecodeEngine()
    first = build_view(window)
    assert first.span_s is None and first.verdict is None
    assert [(p.pool, p.ready_replicas) for p in first.pools] == [("prefill", 2), ("decode", 1)]
    for _ in range(8):
        m.requests.labels("chat", "remote_prefill", "200").inc()
        m.ttft.labels("0-256", "remote_prefill").observe(0.2)
        engine.transfer(0.01, 1_000_000)
        m.kv_transfers.inc()
    engine.reported_to(m)
    for _ in range(2):
        m.requests.labels("completions", "local_prefill", "200").inc()
        m.ttft.labels("1k-4k", "local_prefill").observe(3.0)
        m.prefill_time.labels("1k-4k", "local_prefill").observe(2.0)
    m.requests.labels("chat", "none", "400").inc(2)
    m.rejected.labels("router_inflight").inc(4)
    m.fallbacks.labels("prefill", "error", "retry").inc(2)
    m.itl.observe(0.03)
    window.add(_scrape(m, 4.0))
    view = build_view(window)
    assert view.span_s == 4.0
    assert view.request_rate == pytest.approx(12 / 4)  # lifetime 100 excluded
    assert [(r.label, r.per_s) for r in view.decisions] == [
        ("remote_prefill", 2.0), ("local_prefill", 0.5), ("none", 0.5)
    ]  # fmt: skip
    assert [(r.label, r.per_s) for r in view.statuses] == [("200", 2.5), ("400", 0.5)]
    assert [(r.input_bucket, r.requests) for r in view.ttft] == [("0-256", 8), ("1k-4k", 2)]
    assert view.ttft[0].p99_s is not None and 0.1 < view.ttft[0].p99_s <= 0.25  # not 50 s
    assert view.ttft[1].prefill_p50_s == pytest.approx(1.75)  # in (1, 2.5]
    assert view.ttft[0].prefill_p50_s is None
    assert view.kv is not None and view.kv.bytes_per_s == pytest.approx(1e8)
    assert view.kv.mean_bytes == pytest.approx(1e6)
    assert view.transfers_per_s == 2.0
    assert (view.rejected_per_s, view.fallbacks_per_s) == (1.0, 0.5)
    assert view.itl_p99_s is not None and 0.025 < view.itl_p99_s <= 0.05
    assert view.verdict is not None and view.verdict.message == HINT
    assert [r.replica_id for r in view.replicas] == ["p1", "p2", "d1"]


@pytest.mark.parametrize(
    ("doc", "ids", "note"),
    [
        (None, [], "unavailable"),
        ({"ready": False}, [], "no `pools`"),
        ({"pools": {"prefill": [], "decode": []}}, [], "no replicas"),
        (REPLICAS, ["p1", "p2", "d1"], None),
    ],
)
def test_replica_rows(doc: dict[str, Any] | None, ids: list[str], note: str | None) -> None:
    rows, got_note = replica_rows(doc)
    assert [r.replica_id for r in rows] == ids
    assert got_note is None if note is None else note in (got_note or "")


READ_1M = FabricPoint("READ", 1 << 20, 10e9)
READ_64M = FabricPoint("READ", 64 << 20, 20e9)
WRITE_64M = FabricPoint("WRITE", 64 << 20, 40e9)


@pytest.mark.parametrize(
    ("points", "mean_bytes", "expected"),
    [
        ((READ_1M, READ_64M, WRITE_64M), None, READ_64M),  # best READ (decode pulls)
        ((READ_1M, READ_64M), 900_000.0, READ_1M),  # closest size
        ((READ_1M, READ_64M), 32e6, READ_64M),  # closest in ratio, not difference
        ((WRITE_64M,), 1e3, WRITE_64M),  # no READ rows: use what there is
    ],
)
def test_reference_point(
    points: tuple[FabricPoint, ...], mean_bytes: float | None, expected: FabricPoint
) -> None:
    assert reference_point(points, mean_bytes) == expected


@pytest.mark.parametrize(
    ("observed", "points", "level", "text"),
    [
        (KvBandwidth(4, 4e6, 0.001), None, "info", "no fabric baseline"),
        (KvBandwidth(0, 0, 0), (READ_1M,), "info", "no KV transfers"),
        (KvBandwidth(4, 4 << 20, 0.004), (READ_1M,), "warn", "WARNING"),  # ~1 GB/s of 10
        (KvBandwidth(4, 4 << 20, 0.0015), (READ_1M,), "ok", "= 28% of"),
    ],
)
def test_bandwidth_verdict(
    observed: KvBandwidth, points: tuple[FabricPoint, ...] | None, level: str, text: str
) -> None:
    verdict = bandwidth_verdict(observed, points, 0.25)
    assert verdict.level == level and text in verdict.message


@pytest.mark.parametrize(
    "doc",
    [[], {"sizes": "x"}, {"sizes": [{"bytes": 0, "bandwidth_gbps": 1}, {"op": "READ"}]}],
)
def test_bad_fabric_reports(doc: object) -> None:
    with pytest.raises(FabricReportError):
        parse_fabric_report(doc)


def test_fabric_report_from_kv_check_json() -> None:
    doc = {"sizes": [{"op": "READ", "bytes": 4096, "iterations": 9, "bandwidth_gbps": 1.5}]}
    assert parse_fabric_report(doc) == (FabricPoint("READ", 4096, 1.5e9),)


@pytest.mark.parametrize(
    ("fmt", "value", "text"),
    [
        (fmt_seconds, 0.0123, "12.3 ms"), (fmt_seconds, 2.5, "2.50 s"), (fmt_seconds, None, "—"),
        (fmt_bytes, 512, "512 B"), (fmt_bytes, 1536, "1.5 KiB"), (fmt_bytes, 3 << 30, "3.0 GiB"),
        (fmt_bandwidth, 2.5e9, "2.50 GB/s"), (fmt_bandwidth, 1.2e6, "1.20 MB/s"),
        (fmt_ratio, 0.123, "12.3%"),
    ],
)  # fmt: skip
def test_units(fmt: Any, value: float | None, text: str) -> None:
    assert fmt(value) == text


def _transport(metrics_status: int = 200, replicas_status: int = 200) -> httpx.MockTransport:
    m = RouterMetrics()
    m.requests.labels("chat", "remote_prefill", "200").inc()

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(metrics_status, content=m.render())
        return httpx.Response(replicas_status, json=REPLICAS)

    return httpx.MockTransport(handle)


def test_poller() -> None:
    with Poller("http://router/", transport=_transport(), clock=lambda: 7.0) as poller:
        scrape = poller.scrape()
    assert scrape.t_s == 7.0 and scrape.replicas == REPLICAS
    assert sum_by(scrape.samples, "pdserve_requests_total") == {(): 1.0}
    with Poller("http://router", transport=_transport(replicas_status=404)) as poller:
        assert poller.scrape().replicas is None
    with Poller("http://router", transport=_transport(500)) as poller, pytest.raises(PollError):
        poller.scrape()

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with (
        Poller("http://router", transport=httpx.MockTransport(refuse)) as poller,
        pytest.raises(PollError, match="unreachable"),
    ):
        poller.scrape()


def test_render_shows_warning_and_rows() -> None:
    window = ScrapeWindow(30)
    m = RouterMetrics()
    window.add(_scrape(m, 0.0))
    engine = _DecodeEngine()
    engine.transfer(1.0, 1 << 20)
    engine.reported_to(m)
    m.fallbacks.labels("prefill", "timeout", "local").inc(3)
    window.add(_scrape(m, 2.0))
    console = Console(record=True, width=120)
    console.print(render(build_view(window, (READ_1M,)), "http://x", 30, 2, "12:00:00", "boom"))
    text = console.export_text()
    assert "WARNING: KV 1.05 MB/s" in text and "boom" in text and " p1 " in text
    assert "fallbacks 1.50/s" in text, text


@pytest.mark.parametrize(("status", "code"), [(200, 0), (500, 1)])
def test_cli_once(monkeypatch: pytest.MonkeyPatch, status: int, code: int) -> None:
    def poller(url: str, timeout_s: float) -> Poller:
        return Poller(url, timeout_s, transport=_transport(status))

    monkeypatch.setattr(top_cli, "Poller", poller)
    app = top_cli.typer.Typer()
    app.command()(top_cli.top)
    result = CliRunner().invoke(app, ["--once", "--interval", "0.1"])
    assert result.exit_code == code, result.output
    assert ("remote_prefill" in result.output) == (code == 0)


def test_render_shows_each_elastic_pools_autoscaler_and_its_latest_events() -> None:
    """The replicas document's `scaling` entry, as the router builds it from the policies'
    PoolScaling documents: counts, signal against target, newest event first with reason."""
    up = ScaleEvent(unix_s=1000.0, from_replicas=1, to_replicas=2, reason="queued prefill high")
    down = ScaleEvent(unix_s=2000.0, from_replicas=2, to_replicas=1, reason="queued prefill low")
    doc = PoolScaling(
        pool="prefill", current_replicas=1, target_replicas=1, wanted_replicas=1, signal=0.04,
        signal_target=0.5, reason="hold", updated_unix_s=2001.0, events=(up, down),
    )  # fmt: skip
    replicas = {**REPLICAS, "scaling": {"prefill": doc.model_dump(mode="json")}}
    window = ScrapeWindow(30)
    window.add(_scrape(RouterMetrics(), 0.0, replicas))
    view = build_view(window)
    assert [(e.from_replicas, e.to_replicas) for e in view.scale_events] == [(2, 1), (1, 2)]
    console = Console(record=True, width=120)
    console.print(render(view, "http://x", 30, 2, "12:00:00"))
    text = console.export_text()
    assert "prefill: 1 running · target 1 · policy wants 1 · signal 0.04 s (target 0.5 s)" in text
    assert text.index("prefill 2 -> 1  queued prefill low") < text.index("prefill 1 -> 2")
    plain = Console(record=True, width=120)
    plain.print(render(build_view(_window_of(REPLICAS)), "http://x", 30, 2, "12:00:00"))
    assert "Autoscaling" not in plain.export_text()  # no elastic pool, no section


def _window_of(replicas: dict[str, Any]) -> ScrapeWindow:
    window = ScrapeWindow(30)
    window.add(_scrape(RouterMetrics(), 0.0, replicas))
    return window


def test_render_shows_kv_checks_and_recomputed_handoffs_by_reason() -> None:
    window = ScrapeWindow(30)
    m = RouterMetrics()
    window.add(_scrape(m, 0.0))
    console = Console(record=True, width=120)
    m.kv_integrity_checks.labels("decode").inc(8)
    window.add(_scrape(m, 2.0))
    console.print(render(build_view(window, (READ_1M,)), "http://x", 30, 2, "12:00:00", None))
    assert "KV integrity checked 4.00/s · recomputed none" in console.export_text()
    m.kv_integrity_failures.labels("decode", "stale").inc(2)
    window.add(_scrape(m, 4.0))
    console = Console(record=True, width=120)
    console.print(render(build_view(window, (READ_1M,)), "http://x", 30, 2, "12:00:00", None))
    assert "recomputed stale 0.50/s" in console.export_text()
