"""Several router replicas: config, the Router deployment's options, the local cluster's HTTP
path, each replica's own /metrics server, and `pdserve top` merging the replicas' metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from pdserve.config import parse_config
from pdserve.deploy.app import router_options
from pdserve.local_cluster import _direct_ingress, _serve_env
from pdserve.router.replica_metrics import ReplicaMetricsServer
from pdserve.router_config import RouterConfig
from pdserve.top.merge import merge_routers
from pdserve.top.poll import Poller
from pdserve.top.scrape import parse_metrics


def test_one_router_by_default_with_its_metrics_port_1001_above_the_router_port() -> None:
    router = RouterConfig(port=8100)
    assert (router.num_replicas, router.autoscaling, router.several_replicas) == (1, None, False)
    assert router.metrics_ports == range(9101, 9102)
    assert router_options(router)["num_replicas"] == 1


def test_fixed_replicas_and_an_explicit_metrics_port() -> None:
    router = RouterConfig(num_replicas=3, metrics_port=9300)
    assert router.several_replicas
    assert router.metrics_ports == range(9300, 9303)
    opts = router_options(router)
    assert opts["num_replicas"] == 3 and "autoscaling_config" not in opts


def test_autoscaling_routers_start_within_bounds_and_size_the_port_range() -> None:
    router = RouterConfig.model_validate(
        {
            "num_replicas": 1,
            "autoscaling": {"min_replicas": 2, "max_replicas": 5, "target_ongoing_requests": 16},
        }
    )
    assert router.metrics_ports == range(9001, 9006)
    opts = router_options(router)
    assert "num_replicas" not in opts
    assert opts["autoscaling_config"] == {
        "min_replicas": 2,
        "initial_replicas": 2,
        "max_replicas": 5,
        "target_ongoing_requests": 16,
    }


@pytest.mark.parametrize(
    "router",
    [
        {"num_replicas": 0},
        {"autoscaling": {"min_replicas": 3, "max_replicas": 2}},
        {"autoscaling": {"min_replicas": 0}},
        {"port": 65000},  # metrics ports (port + 1001) would pass 65535
    ],
)
def test_bad_router_replica_settings_are_refused(router: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RouterConfig.model_validate(router)


def test_local_cluster_keeps_direct_ingress_for_one_router_and_the_proxy_for_several() -> None:
    one = parse_config({"router": {"port": 8200}}, origin="test")
    two = parse_config({"router": {"port": 8200, "num_replicas": 2}}, origin="test")
    elastic = parse_config({"router": {"port": 8200, "autoscaling": {}}}, origin="test")
    assert _direct_ingress(one) and _serve_env(one)["RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"]
    for several in (two, elastic):
        assert not _direct_ingress(several)
        assert _serve_env(several)["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "0"


# ------------------------------------------------------------------ a replica's /metrics


async def _get(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


async def _render() -> bytes:
    return b"pdserve_conversations 3.0\n"


def test_each_replica_serves_its_metrics_on_the_first_free_port_of_the_range() -> None:
    async def run() -> None:
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        base = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        ports = range(base, base + 2)
        first = ReplicaMetricsServer("127.0.0.1", ports, _render, lambda _: True)
        second = ReplicaMetricsServer("127.0.0.1", ports, _render, lambda _: True)
        third = ReplicaMetricsServer("127.0.0.1", ports, _render, lambda _: True)
        await first.start()
        await second.start()
        await third.start()  # the range is full: serves nothing, does not fail
        try:
            assert (first.port, second.port, third.port) == (base, base + 1, None)
            answer = await _get(base + 1, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
            assert answer.endswith(b"\r\n\r\npdserve_conversations 3.0\n")
            other = await _get(base, b"GET /v1/models HTTP/1.1\r\n\r\n")
            assert other.startswith(b"HTTP/1.1 404")
        finally:
            for server in (first, second, third):
                await server.close()

    asyncio.run(run())


def test_a_replica_metrics_port_asks_for_the_key_when_metrics_are_protected() -> None:
    async def run() -> None:
        server = ReplicaMetricsServer(
            "127.0.0.1", range(0, 1), _render, lambda auth: auth == "Bearer k"
        )
        await server.start()
        assert server._server is not None
        port = server._server.sockets[0].getsockname()[1]
        try:
            refused = await _get(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert refused.startswith(b"HTTP/1.1 401")
            ok = await _get(port, b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer k\r\n\r\n")
            assert ok.startswith(b"HTTP/1.1 200")
        finally:
            await server.close()

    asyncio.run(run())


# ------------------------------------------------------------------ pdserve top


ROUTER_A = """
pdserve_requests_total{endpoint="chat",decision="remote_prefill",status="200"} 7
pdserve_kv_integrity_failures_total{pool="decode",reason="digest"} 2
pdserve_pool_running_requests{pool="decode"} 4
pdserve_pool_queued_prefill_tokens{pool="prefill"} 100
pdserve_kv_transfer_seconds_bucket{pool="decode",le="+Inf"} 9
"""
ROUTER_B = """
pdserve_requests_total{endpoint="chat",decision="remote_prefill",status="200"} 5
pdserve_kv_integrity_failures_total{pool="decode",reason="digest"} 3
pdserve_pool_running_requests{pool="decode"} 4
pdserve_pool_queued_prefill_tokens{pool="prefill"} 50
pdserve_kv_transfer_seconds_bucket{pool="decode",le="+Inf"} 9
"""


def _value(samples: dict[Any, float], name: str) -> float:
    return next(v for (n, _), v in samples.items() if n == name)


def test_top_sums_each_routers_own_series_and_takes_the_engines_series_once() -> None:
    merged = merge_routers([parse_metrics(ROUTER_A), parse_metrics(ROUTER_B)])
    assert _value(merged, "pdserve_requests_total") == 12  # each router's own requests
    assert _value(merged, "pdserve_pool_queued_prefill_tokens") == 150  # each router's own
    assert _value(merged, "pdserve_kv_integrity_failures_total") == 3  # the engines', freshest
    assert _value(merged, "pdserve_pool_running_requests") == 4
    assert _value(merged, "pdserve_kv_transfer_seconds_bucket") == 9


def test_poller_scrapes_every_router_replica_port_the_router_names() -> None:
    replicas = {"ready": True, "pools": {}, "router": {"metrics_ports": [10000, 10002]}}

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/pdserve/replicas":
            return httpx.Response(200, json=replicas)
        port = request.url.port
        if port == 8000:
            return httpx.Response(200, text=ROUTER_A)  # one replica, at random
        if port == 10000:
            return httpx.Response(200, text=ROUTER_A)
        if port == 10001:
            raise httpx.ConnectError("refused")  # no replica there now
        return httpx.Response(200, text=ROUTER_B)

    with Poller("http://127.0.0.1:8000", transport=httpx.MockTransport(handle)) as poller:
        scrape = poller.scrape()
    assert _value(dict(scrape.samples), "pdserve_requests_total") == 12
    assert _value(dict(scrape.samples), "pdserve_kv_integrity_failures_total") == 3
