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

from pdserve.router.policy.config import PolicyConfig, ScorerWeights
from pdserve.router.policy.cost_model import CostModel, DecodeSample, FitResult, PrefillSample
from pdserve.router.policy.pipeline import RoutingPolicy
from pdserve.router.policy.prefix_index import PrefixIndex, PrefixIndexMode
from pdserve.router.policy.state import InFlightPrefill, OutstandingWork
from pdserve.router.policy.types import (
    Candidate,
    Decision,
    NoReplicaError,
    ReplicaSnapshot,
    RequestSummary,
)

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
