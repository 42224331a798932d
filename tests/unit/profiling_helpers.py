"""Shared data for the `pdserve profile` tests (test_profiling, test_profile_yaml,
test_profile_cli): a fitted cost model, and the response headers and usage body a pdserve
router answers a profiling request with."""

from __future__ import annotations

import json
from typing import Any

from pdserve.profiling import samples as S
from pdserve.router.policy.cost_model import CostModel

FIT = CostModel(fixed_overhead_s=0.0125, per_token_s=3.5e-05, per_token_sq_s=2e-09)
"""A fitted cost model, as `pdserve profile` writes it."""


def headers(timing: dict[str, float], decision: dict[str, Any] | None) -> dict[str, str]:
    """The x-pdserve-timing header (and x-pdserve-decision unless `decision` is None)."""
    out = {S.TIMING_HEADER: json.dumps(timing)}
    return out if decision is None else {**out, S.DECISION_HEADER: json.dumps(decision)}


def usage(prompt: int, cached: int | None) -> dict[str, Any]:
    """A response body's usage (no prompt_tokens_details when `cached` is None)."""
    details = {} if cached is None else {"prompt_tokens_details": {"cached_tokens": cached}}
    return {"usage": {"prompt_tokens": prompt, "completion_tokens": 1, **details}}
