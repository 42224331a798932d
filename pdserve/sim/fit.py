"""Fit the simulator's serving latencies: from `pdserve profile` samples on an idle cluster,
and their growth under load from a measured run's timeline (pure)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import CLIENT_OVERHEAD, Metrics
from pdserve.profiling.samples import ServingSample
from pdserve.router.policy.cost_model import CostModel
from pdserve.sim.layout import SimLayout
from pdserve.sim.predict import workload_requests
from pdserve.sim.profile import SimProfile
from pdserve.sim.simulator import Simulation


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


Z99 = 2.3263
"""The standard normal's 99th percentile: a log-normal's p99 / p50 is exp(Z99 x sigma)."""


def fit_host_contention(
    profile: SimProfile,
    layout: SimLayout,
    workload: BenchConfig,
    measured: Metrics,
    *,
    host_cores: int,
) -> SimProfile:
    """`profile` with `host_cores`, the `host_contention` that makes one Ray Serve hop under
    load as long as in a measured run (the run's median hop, (prefill_hops + decode_hops) p50 /
    4 over its remote prefills, against the idle hop, divided by the mean fraction of host
    cores the simulation finds busy at its hops), the `serving_jitter_sigma` and
    `decode_jitter_sigma` of log-normals with the run's prefill_hops and decode_hops p99 /
    p50, and `client_s` from the run's client_overhead p50 (0 when the run did not record
    it). Raises ValueError when the run has no
    remote-prefill timeline (aggregated, or not pdserve)."""
    stages = measured.stages or {}
    pre, dec = stages.get("prefill_hops"), stages.get("decode_hops")
    if pre is None or dec is None or pre.p50_s is None or dec.p50_s is None:
        raise ValueError("the measured run has no remote-prefill timeline to fit hops from")
    loaded_hop_s = (pre.p50_s + dec.p50_s) / 4
    base = profile.model_copy(update={"host_cores": host_cores, "host_contention": 0.0})
    sim = Simulation(layout, base, concurrency=workload.concurrency)
    sim.run(workload_requests(workload, layout.engines[0].limits.block_size_tokens))
    busy = statistics.fmean(sim.busy_samples) / host_cores if sim.busy_samples else 0.0
    ratio = loaded_hop_s / profile.hop_s if profile.hop_s > 0 else 1.0
    contention = max(0.0, (ratio - 1) / busy) if busy > 0 else 0.0
    client = stages.get(CLIENT_OVERHEAD)
    client_s = client.p50_s if client is not None and client.p50_s is not None else 0.0
    sigma = _lognormal_sigma(pre.p50_s, pre.p99_s, HOPS_PER_STAGE)
    decode_sigma = _lognormal_sigma(dec.p50_s, dec.p99_s, HOPS_PER_STAGE)
    return base.model_copy(
        update={
            "host_contention": contention,
            "serving_jitter_sigma": sigma,
            "decode_jitter_sigma": decode_sigma,
            "client_s": client_s,
            "source": f"{profile.source}; host contention fitted on {layout.name}",
        }
    )


HOPS_PER_STAGE = 2
"""A measured `*_hops` stage is two hops (there and back), each drawn on its own in the
simulation."""


def _lognormal_sigma(p50_s: float, p99_s: float | None, num_terms: int = 1) -> float:
    """The sigma of each of `num_terms` independent, identical log-normals whose sum has the
    measured p99 / p50 (0 when not above 1). A sum spreads less than its terms, so fitting
    the sum's spread to one term would narrow the simulated tail; the terms' sigma comes
    from the Fenton-Wilkinson approximation (the sum as one log-normal with the same mean and
    variance): exp(sigma^2) = 1 + n (exp(sigma_sum^2) - 1)."""
    if p99_s is None or p50_s <= 0 or p99_s <= p50_s:
        return 0.0
    sigma_sum = math.log(p99_s / p50_s) / Z99
    sigma = math.sqrt(math.log1p(num_terms * math.expm1(sigma_sum**2)))
    return min(3.0, sigma)
