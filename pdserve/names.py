"""The names every layer of pdserve shares: the pools and the routing policies (pure data).

Imported by the router, both pools, the engine host, KV transfer, the config schema, the
autoscaler, the benchmarks and the simulator, so it imports nothing from pdserve. Literal types
only: a config field, a metric label and an engine's KV-connector role all spell them alike.
"""

from __future__ import annotations

from typing import Literal, get_args

PoolName = Literal["prefill", "decode"]
"""A pool, and the role of an engine in it: the one name for this pair across pdserve (the
policy's snapshots, the replica view, the engines' KV-connector role)."""

POOLS: tuple[PoolName, ...] = get_args(PoolName)
"""Every pool, in the order pdserve lists them (prefill, then decode)."""

PolicyName = Literal["round_robin", "least_loaded", "pdserve"]
"""Which routing policy decides: two baselines, or pdserve's cost- and cache-aware pipeline."""

RejectReason = Literal[
    "router_inflight",
    "prefill_backlog",
    "decode_streams",
    "tenant_requests_per_minute",
    "tenant_tokens_per_minute",
    "tenant_concurrency",
    "fair_queue_full",
    "fair_queue_timeout",
]
"""The bounded `reason` label of pdserve_requests_rejected_total: the router's own bounds, a
tenant's limits (router/tenants/limits.py) and its tier queues (router/tenants/fair_queue.py)."""
