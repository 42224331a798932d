"""HTTP adapter: one scrape of the routers' /metrics and /v1/pdserve/replicas (httpx).

`Poller.scrape()` returns a `Scrape` stamped with the monotonic time of the /metrics answer,
or raises `PollError` (router unreachable, non-200 /metrics, unparsable text). A failing
replicas endpoint is not an error: the scrape carries `replicas=None`.

Several router replicas: the replicas document names the range of ports where each router
replica serves its own /metrics (router.metrics_ports); every port of it that answers on the
URL's host is scraped and the answers merged (pdserve/top/merge.py). When none answers (e.g.
the URL is a port-forward to one Service port), the /metrics of the URL is used: with one router
replica that is the whole picture, with several it is one replica's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import httpx

from pdserve.router.auth import client_headers
from pdserve.top.merge import merge_routers
from pdserve.top.scrape import SampleKey, Scrape, parse_metrics


class PollError(RuntimeError):
    """The router could not be scraped; the message is meant for the screen."""


class Poller:
    """Scrapes one router; owns an httpx client (close it, or use as a context manager)."""

    def __init__(
        self,
        url: str,
        timeout_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/")
        self._clock = clock
        self._client = httpx.Client(
            base_url=self.url,
            headers=client_headers(os.environ),
            timeout=timeout_s,
            transport=transport,
        )

    def scrape(self) -> Scrape:
        """GET /metrics (required) and /v1/pdserve/replicas (optional) into one Scrape."""
        try:
            resp = self._client.get("/metrics")
        except httpx.HTTPError as exc:
            raise PollError(
                f"router unreachable at {self.url}: {exc or type(exc).__name__}"
            ) from exc
        t_s = self._clock()
        if resp.status_code != 200:
            raise PollError(f"GET {self.url}/metrics answered HTTP {resp.status_code}")
        try:
            samples = parse_metrics(resp.text)
        except ValueError as exc:
            raise PollError(f"GET {self.url}/metrics: not Prometheus text ({exc})") from exc
        replicas = self._replicas()
        per_router = self._router_replicas(replicas)
        if per_router:
            samples = merge_routers(per_router)
        return Scrape(t_s=t_s, samples=samples, replicas=replicas)

    def _router_replicas(self, doc: dict[str, Any] | None) -> list[dict[SampleKey, float]]:
        """Each router replica's own /metrics samples (empty: the document names no range, or
        no port of it answered)."""
        ports = (doc or {}).get("router", {}).get("metrics_ports")
        if not (isinstance(ports, list) and len(ports) == 2):
            return []
        host = httpx.URL(self.url).host
        out = []
        for port in range(int(ports[0]), int(ports[1]) + 1):
            try:
                resp = self._client.get(f"http://{host}:{port}/metrics")
                if resp.status_code == 200:
                    out.append(parse_metrics(resp.text))
            except (httpx.HTTPError, ValueError):
                continue  # no router replica on this port now
        return out

    def _replicas(self) -> dict[str, Any] | None:
        try:
            resp = self._client.get("/v1/pdserve/replicas")
            doc = resp.json() if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Poller:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
