"""The aggregated baseline (deploy/local-aggregated.yaml: two engines that prefill and decode
their own requests, no prefill pool, no KV connector) as this package's own cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.aggregated.settings import (
    RAY_METRICS_PORT_AGG,
    RAY_PORT_AGG,
    ROUTER_PORT_AGG,
)
from tests.integration.cluster import Cluster, package_cluster


@pytest.fixture(scope="package")
def aggregated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    ports = (ROUTER_PORT_AGG, RAY_PORT_AGG, RAY_METRICS_PORT_AGG)
    yield from package_cluster(tmp_path_factory, "local-aggregated.yaml", ports)
