"""Optional OpenTelemetry spans for each request's path: router, prefill, KV transfer, decode.

Off by default (`router.otlp_traces_endpoint: null`): the router then holds no tracer and does
no tracing work at all. When set, `RequestTracer.record()` is called once per finished request
and emits one root span with a child span per timeline stage, timed from the request's
timeline (exported in batches by the OTLP/HTTP exporter, off the request path).
"""

from __future__ import annotations

import time
from typing import Any

from pdserve.router.timeline import Timeline

# Which stages each child span covers, in path order.
SPANS = {
    "router": ("router_queue",),
    "prefill": ("prefill_queue", "prefill", "prefill_hops"),
    "kv_transfer": ("kv_transfer",),
    "decode": ("decode_first_token", "decode_hops", "decode"),
}


class RequestTracer:
    """Owns an OTLP tracer provider; one per router replica. `close()` flushes it."""

    def __init__(self, endpoint: str, service_name: str = "pdserve-router", exporter: Any = None):
        """`exporter` replaces the OTLP/HTTP exporter (tests pass an in-memory one)."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self._provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        self._provider.add_span_processor(
            BatchSpanProcessor(exporter or OTLPSpanExporter(endpoint=endpoint))
        )
        self._tracer: Any = self._provider.get_tracer("pdserve.router")

    def record(self, timeline: Timeline, request_id: str, attributes: dict[str, Any]) -> None:
        """Emit the spans of one finished request (monotonic marks → wall-clock times)."""
        stages = timeline.stages()
        if not stages:
            return
        offset_ns = time.time_ns() - time.monotonic_ns()
        start_ns = int(timeline.arrival_s * 1e9) + offset_ns
        end_ns = start_ns + int(sum(stages.values()) * 1e9)
        root = self._tracer.start_span(
            "pdserve.request",
            start_time=start_ns,
            attributes={"pdserve.request_id": request_id, **attributes},
        )
        from opentelemetry import trace

        ctx = trace.set_span_in_context(root)
        cursor = start_ns
        for name, parts in SPANS.items():
            seconds = sum(stages.get(p, 0.0) for p in parts)
            if not any(p in stages for p in parts):
                continue
            span = self._tracer.start_span(
                f"pdserve.{name}",
                context=ctx,
                start_time=cursor,
                attributes={f"pdserve.{p}_s": stages[p] for p in parts if p in stages},
            )
            cursor += int(seconds * 1e9)
            span.end(end_time=cursor)
        root.end(end_time=max(end_ns, cursor))

    def close(self) -> None:
        self._provider.shutdown()
