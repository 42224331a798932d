"""The routing policy: pure code (no I/O, no Ray/vLLM imports) deciding, per request, which
prefill replica (or none: prefill locally on decode), which decode replica, and which engine
priority.

Reading path: types.py (the data in and out; the pool and policy names come from
`pdserve.names`) → pipeline.py (`RoutingPolicy.decide`, the whole
flow) → plugins.py (filters, scorers, picker, decider, priority) → cost_model.py (prefill
seconds) → prefix_index.py (who holds which prefix blocks) → state.py (in-flight prefills,
aging) → config.py (`PolicyConfig`, on strict.py's `StrictModel`). README.md explains the flow
and how to add a scorer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pdserve.router.policy.config import PolicyConfig, ScorerWeights
from pdserve.router.policy.cost_model import CostModel, DecodeSample, FitResult, PrefillSample
from pdserve.router.policy.state import InFlightPrefill, OutstandingWork
from pdserve.router.policy.types import (
    Candidate,
    Decision,
    NoReplicaError,
    ReplicaSnapshot,
    RequestSummary,
)

if TYPE_CHECKING:
    from pdserve.router.policy.pipeline import RoutingPolicy
    from pdserve.router.policy.prefix_index import PrefixIndex, PrefixIndexMode

# Imported on first use: they load numba (and llvmlite), which must stay out of the engine
# processes that import this package for its config and cost model. vLLM's CPU workers scan
# every loaded module when they start and fail on an llvmlite object
# (tests/unit/test_engine_imports.py).
_LAZY = {
    "RoutingPolicy": "pipeline",
    "PrefixIndex": "prefix_index",
    "PrefixIndexMode": "prefix_index",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "Candidate",
    "CostModel",
    "Decision",
    "DecodeSample",
    "FitResult",
    "InFlightPrefill",
    "NoReplicaError",
    "OutstandingWork",
    "PolicyConfig",
    "PrefillSample",
    "PrefixIndex",
    "PrefixIndexMode",
    "ReplicaSnapshot",
    "RequestSummary",
    "RoutingPolicy",
    "ScorerWeights",
]
