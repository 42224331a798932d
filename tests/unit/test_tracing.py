"""OpenTelemetry spans from a request timeline, and export over real OTLP/HTTP."""

from __future__ import annotations

import http.server
import threading

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pdserve.messages import EngineTimes
from pdserve.router.timeline import Timeline
from pdserve.router.tracing import RequestTracer


def _timeline() -> Timeline:
    t = Timeline(arrival_s=10.0)
    t.prefill_dispatched_s = 10.01
    t.prefill_returned_s = 10.2
    t.prefill_engine = EngineTimes(1.0, 1.02, 1.15)
    t.decode_engine = EngineTimes(2.0, 2.03, 2.05)
    t.first_token_s = 10.3
    t.last_token_s = 10.8
    return t


def test_spans_follow_the_timeline() -> None:
    exporter = InMemorySpanExporter()
    tracer = RequestTracer("unused", exporter=exporter)
    tracer.record(_timeline(), "req-7", {"pdserve.decision": "remote_prefill"})
    tracer.close()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {
        "pdserve.request",
        "pdserve.router",
        "pdserve.prefill",
        "pdserve.kv_transfer",
        "pdserve.decode",
    }
    root = spans["pdserve.request"]
    assert root.attributes["pdserve.request_id"] == "req-7"
    for name in ("router", "prefill", "kv_transfer", "decode"):
        child = spans[f"pdserve.{name}"]
        assert child.parent is not None and child.parent.span_id == root.context.span_id
        assert root.start_time <= child.start_time <= child.end_time <= root.end_time
    assert abs((root.end_time - root.start_time) / 1e9 - 0.8) < 1e-3
    assert spans["pdserve.prefill"].attributes["pdserve.prefill_s"] == 0.13


def test_spans_reach_an_otlp_http_endpoint() -> None:
    received: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["content-length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        tracer = RequestTracer(f"http://127.0.0.1:{server.server_port}/v1/traces")
        tracer.record(_timeline(), "req-8", {})
        tracer.close()  # flushes the batch
    finally:
        server.shutdown()
    assert received, "the OTLP exporter posted nothing"
    assert b"pdserve.kv_transfer" in b"".join(received)
