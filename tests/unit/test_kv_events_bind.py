"""KV events are published on one address (the pod's), not on every interface of the host."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from pdserve.config import PdserveConfig
from pdserve.engine.args import engine_args
from pdserve.kv_transfer.ports import pick_free_port
from pdserve.kv_transfer.vllm_plugin import register
from pdserve.node import advertised_address


def test_the_address_is_the_nodes_then_the_pods_then_rays_then_loopback() -> None:
    # The address every engine binds and advertises for remote peers (KV events, NIXL).
    node = {"PDSERVE_NODE_ADDRESS": "127.0.0.1", "PDSERVE_POD_IP": "10.1.2.3"}
    assert advertised_address("auto", node, "192.168.0.9") == "127.0.0.1"  # `pdserve up`
    assert advertised_address("auto", {"PDSERVE_POD_IP": "10.1.2.3"}, "192.168.0.9") == "10.1.2.3"
    assert advertised_address("auto", {}, "192.168.0.9") == "192.168.0.9"  # Ray's node IP
    assert advertised_address("auto", {}, None) == "127.0.0.1"  # outside Ray
    assert advertised_address("172.16.0.4", node, "192.168.0.9") == "172.16.0.4"  # override


def test_engine_args_publish_on_the_given_endpoint() -> None:
    cfg = PdserveConfig()
    args = engine_args(cfg, "decode", "/models/x", "tcp://10.1.2.3:5570")
    assert args["kv_events_config"]["endpoint"] == "tcp://10.1.2.3:5570"
    assert "kv_events_config" not in engine_args(cfg, "decode", "/models/x")


@pytest.fixture
def publisher_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from vllm.distributed.kv_events import EventPublisherFactory

    saved = dict(EventPublisherFactory._registry)
    monkeypatch.setenv("PDSERVE_KV_EVENTS_BIND", "1")
    yield
    EventPublisherFactory._registry.clear()
    EventPublisherFactory._registry.update(saved)


def _port_taken(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


@pytest.mark.usefixtures("publisher_registry")
def test_the_plugin_makes_vllms_publisher_bind_an_explicit_address() -> None:
    from vllm.config.kv_events import KVEventsConfig
    from vllm.distributed.kv_events import EventPublisherFactory

    port = pick_free_port(25570)
    config = KVEventsConfig(
        enable_kv_cache_events=True, publisher="zmq", endpoint=f"tcp://127.0.0.1:{port}"
    )
    stock = EventPublisherFactory.create(config)
    try:  # vLLM alone connects to a non-wildcard endpoint: nothing listens there
        assert not _port_taken("127.0.0.1", port)
    finally:
        stock.shutdown()
    register()
    bound = EventPublisherFactory.create(config)
    try:
        assert _port_taken("127.0.0.1", port), "the publisher must listen on its endpoint"
    finally:
        bound.shutdown()
