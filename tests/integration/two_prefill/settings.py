"""The 2 prefill + 1 decode package's cluster: the API key its router enforces and its ports
(router, Ray, Ray metrics), apart from every other test cluster's (tests/integration/cluster.py
says which ranges they avoid)."""

API_KEY = "sk-pdserve-test-4f1c"
"""PDSERVE_API_KEY: the `default` tenant's key."""
METERED_KEY = "sk-pdserve-metered-8b2d"
TEAM_KEY = "sk-pdserve-team-c6e0"
TENANT_FILE = f"""
tenants:
  - name: metered
    keys: [{METERED_KEY}]
    limits: {{requests_per_minute: 3, tokens_per_minute: 6000, max_prompt_tokens: 1500}}
  - name: team
    weight: 2
    keys: [{TEAM_KEY}]
"""
"""The cluster's tenant key file (router.auth.api_key_file)."""
RAY_PORT_2P1D = 6396
ROUTER_PORT_2P1D = 14200
RAY_METRICS_PORT_2P1D = 8084
