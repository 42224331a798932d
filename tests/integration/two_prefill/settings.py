"""The 2 prefill + 1 decode package's cluster: the API key its router enforces and its ports
(router, Ray, Ray metrics), apart from every other test cluster's (tests/integration/cluster.py
says which ranges they avoid)."""

API_KEY = "sk-pdserve-test-4f1c"
RAY_PORT_2P1D = 6396
ROUTER_PORT_2P1D = 14200
RAY_METRICS_PORT_2P1D = 8084
