"""A cluster whose prefill pool autoscales (deploy/local-autoscale.yaml: 1-2 prefill replicas on
the pool's own SLO signal, 1 decode), for this package's tests. Started once for the package
and stopped after it; `down` must then leave nothing behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.cluster import Cluster, package_cluster

RAY_PORT_AUTOSCALE = 6398
ROUTER_PORT_AUTOSCALE = 14400
RAY_METRICS_PORT_AUTOSCALE = 8086


@pytest.fixture(scope="package")
def elastic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    ports = (ROUTER_PORT_AUTOSCALE, RAY_PORT_AUTOSCALE, RAY_METRICS_PORT_AUTOSCALE)
    # The prefill pool waits 8 s, as decode does, before it scales down (20 s in the config).
    overrides = {"prefill": {"autoscaling": {"downscale_delay_seconds": 8}}}
    yield from package_cluster(tmp_path_factory, "local-autoscale.yaml", ports, overrides=overrides)
