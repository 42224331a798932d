"""The aggregated baseline (deploy/local-aggregated.yaml: two engines that prefill and decode
their own requests, no prefill pool, no KV connector) as this package's own cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.conftest import Cluster, package_cluster

ROUTER_PORT_AGG = 14500
RAY_PORT_AGG = 6399
RAY_METRICS_PORT_AGG = 8087


@pytest.fixture(scope="package")
def aggregated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    ports = (ROUTER_PORT_AGG, RAY_PORT_AGG, RAY_METRICS_PORT_AGG)
    yield from package_cluster(tmp_path_factory, "local-aggregated.yaml", ports)
