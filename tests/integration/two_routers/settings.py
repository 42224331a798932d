"""The two-router package's cluster ports (apart from every other test cluster's, see
tests/integration/cluster.py): HTTP through Serve's proxy on ROUTER_PORT_2R, each router
replica's own /metrics on METRICS_PORTS_2R."""

from __future__ import annotations

ROUTER_PORT_2R = 14600
RAY_PORT_2R = 6392
RAY_METRICS_PORT_2R = 8083
NUM_ROUTERS = 2
METRICS_PORTS_2R = range(14610, 14610 + NUM_ROUTERS)
