"""The two-router package's cluster ports (apart from every other test cluster's, see
tests/integration/cluster.py): HTTP through Serve's proxy on ROUTER_PORT_2R, each router
replica's own /metrics on METRICS_PORTS_2R."""

from __future__ import annotations

ROUTER_PORT_2R = 14600
RAY_PORT_2R = 6392
RAY_METRICS_PORT_2R = 8083
NUM_ROUTERS = 2
METRICS_PORTS_2R = range(14610, 14610 + NUM_ROUTERS)
API_KEY_2R = "sk-pdserve-two-routers-3a7c"
"""PDSERVE_API_KEY: the default tenant's key."""
SPLIT_KEY = "sk-pdserve-split-5d19"
SPLIT_RPM = 4
"""Tenant `split`'s requests per minute: each of the two routers enforces half."""
TENANT_FILE_2R = f"""
tenants:
  - name: split
    keys: [{SPLIT_KEY}]
    limits: {{requests_per_minute: {SPLIT_RPM}}}
"""
