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
