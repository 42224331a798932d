"""pdserve's records reach Ray Serve's replica log handlers, at Serve's level."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from pdserve.serve_logs import log_to_serve


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def serve_handler() -> Iterator[Collect]:
    serve, ours = logging.getLogger("ray.serve"), logging.getLogger("pdserve")
    saved = (serve.handlers[:], serve.level, serve.propagate, ours.handlers[:], ours.level,
             ours.propagate)  # fmt: skip
    handler = Collect()
    serve.handlers = [handler]
    serve.setLevel(logging.WARNING)
    serve.propagate = False
    yield handler
    serve.handlers, ours.handlers = saved[0], saved[3]
    serve.setLevel(saved[1])
    ours.setLevel(saved[4])
    serve.propagate, ours.propagate = saved[2], saved[5]


def test_pdserve_warnings_reach_the_serve_replica_log(serve_handler: Collect) -> None:
    log_to_serve()
    log_to_serve()  # idempotent: no duplicate handlers
    logging.getLogger("pdserve.router").warning("request r-1 failed at prefill")
    logging.getLogger("pdserve.engine").info("starting prefill engine")  # below Serve's level
    assert serve_handler.messages == ["request r-1 failed at prefill"]
