"""Fit the simulator's serving latencies from `pdserve profile` samples (pure)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

from pdserve.profiling.samples import ServingSample
from pdserve.router.policy.cost_model import CostModel
from pdserve.sim.profile import SimProfile


def fit_sim_profile(
    cost_model: CostModel, serving: Sequence[ServingSample], *, source: str
) -> SimProfile:
    """The simulator profile: the fitted engine `cost_model`, plus, from the serving samples
    of an idle cluster, the router's time before dispatch (median router_queue), one hop
    (median of the prefill and decode round trips / 4), and the KV transfer as a line in the
    prompt's tokens (least squares of the decode engine's KV wait, clamped at >= 0). The
    transfer's per-token term replaces the cost model's kv_transfer_per_token_s.
    Raises ValueError with fewer than 2 samples or one prompt length only."""
    if len(serving) < 2 or len({s.num_prompt_tokens for s in serving}) < 2:
        raise ValueError(
            "need serving samples of at least two prompt lengths (remote prefills) to fit the "
            "KV transfer; is local_prefill_max_cold_tokens above every profiled length?"
        )
    x = np.array([[1.0, s.num_prompt_tokens] for s in serving])
    y = np.array([s.kv_wait_s for s in serving])
    (fixed, per_token), *_ = np.linalg.lstsq(x, y, rcond=None)
    if per_token < 0:
        fixed, per_token = float(np.median(y)), 0.0
    hops = [(s.prefill_hops_s + s.decode_hops_s) / 4 for s in serving]
    return SimProfile(
        cost_model=cost_model.model_copy(update={"kv_transfer_per_token_s": float(per_token)}),
        router_s=statistics.median(s.router_s for s in serving),
        hop_s=statistics.median(hops),
        kv_transfer_fixed_s=max(0.0, float(fixed)),
        source=source,
    )
