"""Per-tenant usage: the Tenants view of `pdserve top` and `pdserve tenants usage|hash-key`,
over synthetic /metrics text (no network, no router)."""

from __future__ import annotations

import hashlib
import io
import json
import math
import pathlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from pdserve import tenants_cli
from pdserve.cli import app as pdserve_app
from pdserve.router.metrics import RouterMetrics
from pdserve.tenant_config import TenantSpec
from pdserve.top.merge import merge_routers
from pdserve.top.model import build_view
from pdserve.top.poll import Poller
from pdserve.top.render import render, tenant_tables
from pdserve.top.scrape import Scrape, parse_metrics
from pdserve.top.tenants import TenantRow, tenant_rows
from pdserve.top.units import fmt_amount
from pdserve.top.window import ScrapeWindow, delta

BOUNDS = (0.05, 0.1, 0.5, 1.0, 5.0, math.inf)
Labels = tuple[tuple[str, str], ...]


class Exposition:
    """Prometheus text for a few families: counters (`_total`), gauges, histograms built from
    their observations (cumulative buckets, `_count`, `_sum`)."""

    def __init__(self) -> None:
        self.families: dict[str, tuple[str, list[str]]] = {}

    def _lines(self, family: str, kind: str) -> list[str]:
        return self.families.setdefault(family, (kind, []))[1]

    @staticmethod
    def _labels(labels: dict[str, str], **extra: str) -> str:
        pairs = {**labels, **extra}
        return "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}" if pairs else ""

    def counter(self, family: str, labels: dict[str, str], value: float) -> Exposition:
        self._lines(family, "counter").append(f"{family}_total{self._labels(labels)} {value}")
        return self

    def gauge(self, family: str, labels: dict[str, str], value: float) -> Exposition:
        self._lines(family, "gauge").append(f"{family}{self._labels(labels)} {value}")
        return self

    def histogram(
        self, family: str, labels: dict[str, str], observations: list[float]
    ) -> Exposition:
        lines = self._lines(family, "histogram")
        for le in BOUNDS:
            n = sum(1 for o in observations if o <= le)
            bound = "+Inf" if le == math.inf else repr(le)
            lines.append(f"{family}_bucket{self._labels(labels, le=bound)} {n}")
        lines.append(f"{family}_count{self._labels(labels)} {len(observations)}")
        lines.append(f"{family}_sum{self._labels(labels)} {sum(observations)}")
        return self

    def text(self) -> str:
        out = []
        for family, (kind, lines) in self.families.items():
            out += [f"# HELP {family} test", f"# TYPE {family} {kind}", *lines]
        return "\n".join(out) + "\n"


def _alice_bob(late: bool) -> Exposition:
    """Two scrapes of a router 10 s apart (`late`: the second). Over the window alice has 30
    requests (10 of them 429s: 8 concurrency, 2 queue full), 5000 prompt tokens (2000 cached),
    800 output, 6 prefill seconds, 40 KV block-seconds, 20 TTFTs in (0.05, 0.1] and ITLs in
    (0.01 .. 0.05]; bob 10 requests, 2 prefill seconds, queue waits on both tiers; carol only
    in flight. Each has a lifetime before the window that the view must not count."""
    e = Exposition()
    a = {"tenant": "alice"}
    b = {"tenant": "bob"}
    e.counter("pdserve_tenant_requests", {**a, "status": "200"}, 120 if late else 100)
    e.counter("pdserve_tenant_requests", {**b, "status": "200"}, 20 if late else 10)
    if late:
        e.counter("pdserve_tenant_requests", {**a, "status": "429"}, 10)
        e.counter("pdserve_tenant_rejected", {**a, "reason": "tenant_concurrency"}, 8)
        e.counter("pdserve_tenant_rejected", {**a, "reason": "fair_queue_full"}, 2)
    for kind, before, after in (("prompt", 1000, 6000), ("cached", 0, 2000), ("output", 0, 800)):
        e.counter("pdserve_tenant_tokens", {**a, "kind": kind}, after if late else before)
    e.counter("pdserve_tenant_prefill_seconds", a, 11.0 if late else 5.0)
    e.counter("pdserve_tenant_prefill_seconds", b, 3.0 if late else 1.0)
    e.counter("pdserve_tenant_decode_kv_block_seconds", a, 140.0 if late else 100.0)
    lifetime = [30.0] * 50  # slow requests before the window
    e.histogram(
        "pdserve_tenant_time_to_first_token_seconds", a, lifetime + ([0.08] * 20 if late else [])
    )
    e.histogram("pdserve_tenant_inter_token_latency_seconds", a, [0.04] * 10 if late else [])
    e.histogram(
        "pdserve_tenant_queue_wait_seconds", {**b, "tier": "decode"}, [2.0] * 4 if late else []
    )
    e.histogram(
        "pdserve_tenant_queue_wait_seconds", {**b, "tier": "prefill"}, [0.0] * 4 if late else []
    )
    e.gauge("pdserve_tenant_inflight_requests", a, 3 if late else 1)
    e.gauge("pdserve_tenant_inflight_requests", b, 0)
    e.gauge("pdserve_tenant_inflight_requests", {"tenant": "carol"}, 2)
    e.counter("pdserve_requests", {"endpoint": "chat", "decision": "none", "status": "200"}, 7)
    return e


def _scrape(t_s: float, late: bool) -> Scrape:
    return Scrape(t_s, parse_metrics(_alice_bob(late).text()))


def _window() -> ScrapeWindow:
    window = ScrapeWindow(30)
    window.add(_scrape(0.0, False))
    window.add(_scrape(10.0, True))
    return window


def _rows() -> dict[str, TenantRow]:
    return {r.tenant: r for r in build_view(_window()).tenants}


def test_tenant_rows_over_the_window() -> None:
    rows = _rows()
    assert list(rows) == ["alice", "bob", "carol"]
    alice, bob, carol = rows["alice"], rows["bob"], rows["carol"]
    assert alice.span_s == 10.0
    assert (alice.requests, alice.per_s(alice.requests)) == (30.0, 3.0)
    assert (alice.rejected, alice.per_s(alice.rejected)) == (10.0, 1.0)
    assert alice.rejected_by_reason == (("tenant_concurrency", 8.0), ("fair_queue_full", 2.0))
    assert alice.top_reason == "tenant_concurrency" and bob.top_reason is None
    assert (alice.prompt_tokens, alice.cached_tokens, alice.output_tokens) == (5000, 2000, 800)
    assert alice.per_s(alice.prompt_tokens) == 500.0
    assert (alice.prefill_s, alice.per_s(alice.prefill_s)) == (6.0, 0.6)
    assert alice.prefill_share == pytest.approx(0.75) and bob.prefill_share == pytest.approx(0.25)
    assert alice.per_s(alice.kv_block_s) == 4.0
    # The window's 20 TTFTs in (0.05, 0.1], not the 50 of 30 s before it.
    assert alice.ttft_p50_s is not None and 0.05 < alice.ttft_p50_s <= 0.1
    assert alice.ttft_p99_s is not None and 0.05 < alice.ttft_p99_s <= 0.1
    assert alice.itl_p99_s is not None and 0.01 < alice.itl_p99_s <= 0.05
    assert bob.ttft_p50_s is None and bob.itl_p99_s is None  # no observation: no quantile
    assert [t for t, _ in bob.queue_p99_s] == ["prefill", "decode"]
    assert bob.queue_p99("prefill") == pytest.approx(0.0495)  # in the first bucket (0, 0.05]
    assert bob.queue_p99("decode") is not None and 1.0 < bob.queue_p99("decode") <= 5.0  # type: ignore[operator]
    assert (alice.inflight, bob.inflight, carol.inflight) == (3, 0, 2)
    assert (carol.requests, carol.prefill_share, carol.per_s(carol.requests)) == (0.0, 0.0, 0.0)


def test_one_scrape_gives_in_flight_only() -> None:
    window = ScrapeWindow(30)
    window.add(_scrape(0.0, False))
    rows = build_view(window).tenants
    assert [(r.tenant, r.span_s, r.inflight) for r in rows] == [
        ("alice", None, 1), ("bob", None, 0), ("carol", None, 2)
    ]  # fmt: skip
    assert rows[0].per_s(100.0) is None
    assert rows[0].as_dict()["requests_per_s"] is None


def test_no_tenant_series_no_rows_and_no_section() -> None:
    e = Exposition().counter(
        "pdserve_requests", {"endpoint": "chat", "decision": "none", "status": "200"}, 3
    )
    window = ScrapeWindow(30)
    window.add(Scrape(0.0, parse_metrics(e.text())))
    window.add(Scrape(2.0, parse_metrics(e.text())))
    view = build_view(window)
    assert view.tenants == ()
    console = Console(record=True, width=120)
    console.print(render(view, "http://x", 30, 2, "12:00:00"))
    assert "Tenants" not in console.export_text()


def test_top_renders_the_tenants_tables_in_80_columns() -> None:
    console = Console(record=True, width=80)
    console.print(render(build_view(_window()), "http://x", 30, 2, "12:00:00"))
    text = console.export_text()
    assert "Tenants: requests and tokens (per second)" in text
    assert "Tenants: cost (per second) and latency" in text
    assert "…" not in text  # no header or cell cut short
    traffic = text[text.index("Tenants: requests") :]
    alice = next(line for line in traffic.splitlines() if line.startswith("alice"))
    # req/s, 429/s, top reason (own-limit prefix dropped), prompt/cached/output tok/s, in flight
    assert alice.split() == ["alice", "3", "1", "concurrency", "500", "200", "80", "3"]
    cost = text[text.index("Tenants: cost") :]
    alice = next(line for line in cost.splitlines() if line.startswith("alice"))
    assert "0.60" in alice and "75.0%" in alice and " 4 " in alice
    bob = next(line for line in cost.splitlines() if line.startswith("bob"))
    assert bob.split()[:3] == ["bob", "0.20", "25.0%"]
    assert "queue wait" not in text  # the usage report's table only
    assert all(len(line) <= 80 for line in text.splitlines())


def test_totals_and_rates_cells() -> None:
    console = Console(record=True, width=120)
    console.print(tenant_tables(tuple(_rows().values()), with_totals=True))
    text = console.export_text()
    assert "Tenants: requests and tokens (total and per second)" in text
    lines = text.splitlines()
    alice = lines.index(next(line for line in lines if line.startswith("alice")))
    assert lines[alice].split() == ["alice", "30", "10", "concurrency", "5000", "2000", "800", "3"]
    assert lines[alice + 1].split() == ["3/s", "1/s", "500/s", "200/s", "80/s"]
    assert "0.60/s" in text
    queue = text[text.index("Tenants: fair-queue wait p99 by tier") :]
    assert next(line for line in queue.splitlines() if line.startswith("bob")).split() == [
        "bob", "49.5", "ms", "4.96", "s"
    ]  # fmt: skip


def test_router_replicas_are_summed_for_tenant_series() -> None:
    """Scope "router": each router replica exports its own share; the merge adds them."""
    one = parse_metrics(_alice_bob(True).text())
    merged = merge_routers([one, one])
    window = ScrapeWindow(30)
    window.add(Scrape(0.0, merge_routers([parse_metrics(_alice_bob(False).text())] * 2)))
    window.add(Scrape(10.0, merged))
    rows = {r.tenant: r for r in build_view(window).tenants}
    assert rows["alice"].requests == 60.0 and rows["alice"].inflight == 6
    assert rows["alice"].prefill_share == pytest.approx(0.75)


def test_view_from_the_routers_own_tenant_metrics() -> None:
    """The router's real registry: family names, `_total` suffixes and labels must match."""
    m = RouterMetrics()
    m.tenant_requests.labels("alice", "200").inc(5)
    m.tenant_inflight.labels("alice").set(1)
    first = Scrape(0.0, parse_metrics(m.render().decode()))
    m.tenant_requests.labels("alice", "200").inc(4)
    m.tenant_rejected.labels("alice", "tenant_tokens_per_minute").inc(2)
    m.tenant_tokens.labels("alice", "prompt").inc(900)
    m.tenant_tokens.labels("alice", "cached").inc(100)
    m.tenant_tokens.labels("alice", "output").inc(40)
    m.tenant_prefill_seconds.labels("alice").inc(1.5)
    m.tenant_kv_block_seconds.labels("alice").inc(8.0)
    m.tenant_ttft.labels("alice").observe(0.3)
    m.tenant_itl.labels("alice").observe(0.02)
    m.tenant_queue_wait.labels("alice", "prefill").observe(0.0)
    second = Scrape(2.0, parse_metrics(m.render().decode()))
    (row,) = tenant_rows(second.samples, delta(first, second))
    assert (row.tenant, row.requests, row.rejected, row.top_reason) == (
        "alice", 4.0, 2.0, "tenant_tokens_per_minute"
    )  # fmt: skip
    assert (row.prompt_tokens, row.cached_tokens, row.output_tokens) == (900, 100, 40)
    assert (row.prefill_s, row.prefill_share, row.kv_block_s, row.inflight) == (1.5, 1.0, 8, 1)
    assert row.ttft_p99_s is not None and row.itl_p99_s is not None
    assert row.queue_p99("prefill") is not None


def test_fmt_amount() -> None:
    assert [fmt_amount(v) for v in (None, 0.0, 0.25, 12.34, 3.0, 1234.5, 12345, 2.5e6)] == [
        "—", "0", "0.25", "12.3", "3", "1234", "12.3k", "2.50M"
    ]  # fmt: skip


# ---- pdserve tenants usage --------------------------------------------------------------------

ROUTER_PORTS = (9101, 9102)


def _cluster_transport() -> httpx.MockTransport:
    """Two router replicas on ROUTER_PORTS: the first /metrics of each is the early scrape, the
    next ones the late scrape; the URL's own /metrics is one replica's view (not used)."""
    calls: dict[int, int] = {}

    def handle(request: httpx.Request) -> httpx.Response:
        port = request.url.port or 80
        if request.url.path == "/v1/pdserve/replicas":
            return httpx.Response(
                200, json={"pools": {}, "router": {"metrics_ports": ROUTER_PORTS}}
            )
        if port in ROUTER_PORTS:
            calls[port] = calls.get(port, 0) + 1
            return httpx.Response(200, text=_alice_bob(calls[port] > 1).text())
        return httpx.Response(200, text="")

    return httpx.MockTransport(handle)


def _ticks(*values: float) -> Iterator[float]:
    yield from values


@pytest.fixture
def fake_cluster(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """`pdserve tenants usage` against two fake router replicas; scrape clock 0 s then 10 s;
    the list collects the waits asked for (no real sleep)."""
    transport = _cluster_transport()
    clock = _ticks(0.0, 10.0)
    waits: list[float] = []

    def poller(url: str, timeout_s: float) -> Poller:
        return Poller(url, timeout_s, transport=transport, clock=lambda: next(clock))

    monkeypatch.setattr(tenants_cli, "Poller", poller)
    monkeypatch.setattr(tenants_cli, "_wait_with_progress", lambda _c, s: waits.append(s))
    return waits


def test_usage_command_merges_router_replicas_and_writes_json(
    fake_cluster: list[float], tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "usage.json"
    result = CliRunner().invoke(
        pdserve_app,
        ["tenants", "usage", "--url", "http://router:8000", "--window", "10", "--json", str(out)],
        env={"COLUMNS": "160"},
    )
    assert result.exit_code == 0, result.output
    assert len(fake_cluster) == 1 and 9.0 < fake_cluster[0] <= 10.0
    assert "over 10.0 s" in result.output and "alice" in result.output
    assert "carol" in result.output
    doc = json.loads(out.read_text())
    assert (doc["window_s"], doc["span_s"]) == (10.0, 10.0)
    alice = next(t for t in doc["tenants"] if t["tenant"] == "alice")
    # Two router replicas, each with the same share: the sums double.
    assert (alice["requests"], alice["requests_per_s"]) == (60.0, 6.0)
    assert alice["rejected_by_reason"] == {"tenant_concurrency": 16.0, "fair_queue_full": 4.0}
    assert alice["top_reject_reason"] == "tenant_concurrency"
    assert alice["tokens"] == {"prompt": 10000.0, "cached": 4000.0, "output": 1600.0}
    assert alice["tokens_per_s"]["prompt"] == 1000.0
    assert alice["prefill_seconds_per_s"] == 1.2 and alice["prefill_share"] == 0.75
    assert alice["decode_kv_block_seconds"] == 80.0 and alice["inflight_requests"] == 6
    assert 0.05 < alice["ttft_p99_s"] <= 0.1
    bob = next(t for t in doc["tenants"] if t["tenant"] == "bob")
    assert set(bob["queue_wait_p99_s"]) == {"prefill", "decode"}


def test_usage_command_without_tenant_series(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text="")
        return httpx.Response(404)

    def poller(url: str, timeout_s: float) -> Poller:
        return Poller(url, timeout_s, transport=httpx.MockTransport(handle))

    monkeypatch.setattr(tenants_cli, "Poller", poller)
    monkeypatch.setattr(tenants_cli, "_wait_with_progress", lambda _c, _s: None)
    out = tmp_path / "u.json"
    result = CliRunner().invoke(pdserve_app, ["tenants", "usage", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "no tenant series" in result.output
    assert json.loads(out.read_text())["tenants"] == []


def test_usage_command_router_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def poller(url: str, timeout_s: float) -> Poller:
        return Poller(url, timeout_s, transport=httpx.MockTransport(refuse))

    monkeypatch.setattr(tenants_cli, "Poller", poller)
    result = CliRunner().invoke(pdserve_app, ["tenants", "usage", "--window", "1"])
    assert result.exit_code == 1
    assert "unreachable" in result.output


def test_usage_command_rejects_a_json_path_in_a_missing_folder(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "no" / "u.json"
    result = CliRunner().invoke(pdserve_app, ["tenants", "usage", "--json", str(bad)])
    assert result.exit_code == 2 and "no folder" in result.output


def test_wait_with_progress_waits_and_shows_progress() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=80)
    tenants_cli._wait_with_progress(console, 0.3)
    assert "measuring usage over 0 s" in console.file.getvalue()  # type: ignore[attr-defined]


# ---- pdserve tenants hash-key -----------------------------------------------------------------


def test_hash_key_prints_the_sha256_the_key_file_takes() -> None:
    result = CliRunner().invoke(pdserve_app, ["tenants", "hash-key"], input="  sk-alice-1\n")
    assert result.exit_code == 0, result.output
    digest = result.output.strip()
    assert digest == hashlib.sha256(b"sk-alice-1").hexdigest()
    assert "sk-alice" not in result.output
    TenantSpec(name="alice", key_sha256=[digest])  # the key file accepts it


@pytest.mark.parametrize(("stdin", "message"), [("", "no key"), ("a\nb\n", "one key per call")])
def test_hash_key_needs_exactly_one_key(stdin: str, message: str) -> None:
    result = CliRunner().invoke(pdserve_app, ["tenants", "hash-key"], input=stdin)
    assert result.exit_code == 2
    assert message in result.output


def test_read_key_at_a_terminal_does_not_echo(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    asked: list[Any] = []
    monkeypatch.setattr(tenants_cli.getpass, "getpass", lambda p: asked.append(p) or "k1 ")
    assert tenants_cli.read_key(Tty()) == "k1"
    assert asked == ["API key: "]
