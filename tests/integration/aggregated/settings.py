"""The aggregated package's cluster: its ports (router, Ray, Ray metrics), apart from every
other test cluster's (tests/integration/cluster.py says which ranges they avoid)."""

ROUTER_PORT_AGG = 14500
RAY_PORT_AGG = 6399
RAY_METRICS_PORT_AGG = 8087
