"""A 1 prefill + 1 decode cluster (deploy/local.yaml) with two router replicas behind one URL,
started once for the package and stopped after it. Only the router block differs from
deploy/local.yaml: `num_replicas: 2` (HTTP then goes through Serve's proxy on router.port) and
the per-replica metrics ports; and an API key (the default tenant's) with a tenant key file of
one rate-limited tenant."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.cluster import Cluster, package_cluster
from tests.integration.two_routers.settings import (
    API_KEY_2R,
    METRICS_PORTS_2R,
    NUM_ROUTERS,
    RAY_METRICS_PORT_2R,
    RAY_PORT_2R,
    ROUTER_PORT_2R,
    TENANT_FILE_2R,
)


@pytest.fixture(scope="package")
def routers_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    key_file = tmp_path_factory.mktemp("tenants-2r") / "keys.yaml"
    key_file.write_text(TENANT_FILE_2R)
    overrides = {
        "router": {
            "num_replicas": NUM_ROUTERS,
            "metrics_port": METRICS_PORTS_2R.start,
            "auth": {"api_key_file": str(key_file)},
        },
    }
    ports = (ROUTER_PORT_2R, RAY_PORT_2R, RAY_METRICS_PORT_2R)
    yield from package_cluster(
        tmp_path_factory, "local.yaml", ports, api_key=API_KEY_2R, overrides=overrides
    )
