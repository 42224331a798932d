"""A 1 prefill + 1 decode cluster (deploy/local.yaml) with two router replicas behind one URL,
started once for the package and stopped after it. Only the router block differs from
deploy/local.yaml: `num_replicas: 2` (HTTP then goes through Serve's proxy on router.port) and
the per-replica metrics ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.cluster import Cluster, package_cluster
from tests.integration.two_routers.settings import (
    METRICS_PORTS_2R,
    NUM_ROUTERS,
    RAY_METRICS_PORT_2R,
    RAY_PORT_2R,
    ROUTER_PORT_2R,
)


@pytest.fixture(scope="package")
def routers_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    overrides = {
        "router": {"num_replicas": NUM_ROUTERS, "metrics_port": METRICS_PORTS_2R.start},
    }
    ports = (ROUTER_PORT_2R, RAY_PORT_2R, RAY_METRICS_PORT_2R)
    yield from package_cluster(tmp_path_factory, "local.yaml", ports, overrides=overrides)
