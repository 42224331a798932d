"""Each router replica's own GET /metrics, on a port of its own (router.metrics_ports).

Why: with several router replicas the /metrics on router.port answers for whichever replica
Ray Serve's proxy picked, so a scrape there sees one replica at random. Each replica therefore
also serves its registry on the first free port of a small range on the head node, where
Prometheus (the chart's PodMonitor) and `pdserve top` scrape every port of the range.

`ReplicaMetricsServer` is built once per router replica and started in the router app's
lifespan, on the replica's event loop (the render function reads the router's state without
locks, so it must run on that loop). It answers only `GET /metrics` (404 otherwise, 401 when
the API key is required and missing), one request per connection, HTTP/1.1 with
`Connection: close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger("pdserve.router")

READ_TIMEOUT_S = 10.0
MAX_HEADER_BYTES = 16 << 10
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class ReplicaMetricsAddress:
    """Where router replicas serve their own /metrics: `host` and one port each from `ports`
    (router.host and router.metrics_ports)."""

    host: str
    ports: range


class ReplicaMetricsServer:
    """A minimal HTTP server for one replica's /metrics on the first free port of `ports`."""

    def __init__(
        self,
        host: str,
        ports: range,
        render: Callable[[], Awaitable[bytes]],
        authorized: Callable[[str | None], bool],
    ) -> None:
        """`render`: the Prometheus text of this replica. `authorized(authorization header)`:
        whether a scrape may read it (always True unless router.auth.protect_metrics)."""
        self._host = host
        self._ports = ports
        self._render = render
        self._authorized = authorized
        self._server: asyncio.Server | None = None
        self.port: int | None = None
        """The port bound; None before `start` and when every port of the range was taken."""

    async def start(self) -> None:
        """Bind the first free port of the range. Every port taken (more replicas than the
        range, or another program): log a warning and serve nothing (this replica's series
        are then only on router.port, at random)."""
        for port in self._ports:
            try:
                self._server = await asyncio.start_server(self._serve, self._host, port)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                continue
            self.port = port
            return
        log.warning(
            "router replica metrics: every port of %d..%d is taken; this replica's /metrics is "
            "only reachable through router.port",
            self._ports.start,
            self._ports.stop - 1,
        )

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            status, body = await self._answer(head)
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass  # a client that went away or sent no complete request: nothing to answer
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, head: bytes) -> tuple[str, bytes]:
        if len(head) > MAX_HEADER_BYTES:
            return "431 Request Header Fields Too Large", b""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or parts[0] != "GET" or parts[1].split("?")[0] != "/metrics":
            return "404 Not Found", b"only GET /metrics here\n"
        authorization = None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "authorization":
                authorization = value.strip()
        if not self._authorized(authorization):
            return "401 Unauthorized", b"an API key is required for /metrics\n"
        return "200 OK", await self._render()
