"""The host's speed between a run's rounds: a simulated run at one speed takes every modelled
time that many times; a prediction pools runs at evenly spaced speeds of the profile's
`round_speed_sigma`; the sigma is measured from a run's rounds."""

from __future__ import annotations

import math
import statistics

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.rounds import round_speed_sigma
from pdserve.sim import predict as predict_module
from pdserve.sim.cpu_host import CpuHost
from pdserve.sim.host import run_speed_factors
from pdserve.sim.predict import predict
from pdserve.sim.simulator import Simulation
from tests.unit.bench.report_records import policy_report, record
from tests.unit.sim.helpers import COST, LOCAL_PROFILE, PROFILE, layout, local_layouts, request


def test_a_run_at_speed_k_takes_k_times_every_engine_step_and_serving_time() -> None:
    """A remote prefill alone: router, hops, prompt, KV transfer, decode steps all stretch."""
    lay = layout(num_prefill=1)
    req = [request(0, 2000, out=3)]
    [steady] = Simulation(lay, PROFILE).run(req).results
    [slow] = Simulation(lay, PROFILE, speed_factor=1.5).run(req).results
    assert steady.decision is not None and steady.decision.prefill_replica_id == "p0"
    assert slow.ttft_s == pytest.approx(1.5 * steady.ttft_s)
    assert slow.chunk_gaps_s == pytest.approx([1.5 * g for g in steady.chunk_gaps_s])
    assert steady.chunk_gaps_s == pytest.approx([COST.est_decode_step_s(1, 2000)] * 2)


def test_a_run_s_speed_must_be_positive() -> None:
    with pytest.raises(ValueError, match="speed_factor must be > 0"):
        Simulation(layout(), PROFILE, speed_factor=0.0)


def test_the_pooled_runs_take_evenly_spaced_speeds_about_the_profile_s() -> None:
    factors = run_speed_factors(0.11, 8)
    assert factors == sorted(factors) and len(set(factors)) == 8
    # Symmetric in the log about 1: the k-th slowest and k-th fastest cancel.
    assert all(a * b == pytest.approx(1.0) for a, b in zip(factors, reversed(factors), strict=True))
    assert factors[0] == pytest.approx(math.exp(0.11 * statistics.NormalDist().inv_cdf(1 / 16)))
    assert run_speed_factors(0.11, 1) == [1.0]  # one run: the profile's own speed
    assert run_speed_factors(0.0, 4) == [1.0] * 4
    with pytest.raises(ValueError):
        run_speed_factors(-0.1, 4)


def test_a_prediction_simulates_each_pooled_run_at_its_speed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each seed gets its factor; the pooled TPOT p50 stays about the steady one while the
    tails move out (the slow runs' requests are the slowest of the pool)."""
    seen: list[tuple[int, float]] = []

    class Recording(Simulation):
        def __init__(self, *args: object, seed: int = 0, speed_factor: float = 1.0, **kw: object):
            seen.append((seed, speed_factor))
            super().__init__(*args, seed=seed, speed_factor=speed_factor, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(predict_module, "Simulation", Recording)
    lay = local_layouts("1p1d")["1p1d"]
    idle = LOCAL_PROFILE.with_host(CpuHost())
    workload = BenchConfig(workload="mixed", num_requests=60, request_rate=4.0, concurrency=16)
    steady = predict("1p1d", lay, idle, workload, runs=8)
    spread_profile = idle.with_host_terms(round_speed_sigma=0.3)
    spread = predict("1p1d", lay, spread_profile, workload, runs=8)
    assert seen[:8] == [(i, 1.0) for i in range(8)]
    assert seen[8:] == list(enumerate(run_speed_factors(0.3, 8)))
    assert steady.metrics.tpot_p50_s is not None and spread.metrics.tpot_p50_s is not None
    assert spread.metrics.tpot_p50_s == pytest.approx(steady.metrics.tpot_p50_s, rel=0.1)
    assert steady.metrics.ttft_p99_s is not None and spread.metrics.ttft_p99_s is not None
    assert spread.metrics.ttft_p99_s > 1.1 * steady.metrics.ttft_p99_s


def _round(round_index: int, tpot_s: float, n: int = 5) -> list:
    """`n` requests of one round decoding at `tpot_s` (10 tokens after the first)."""
    return [record("all", 0.1, round_index=round_index, e2e_s=0.1 + 10 * tpot_s) for _ in range(n)]


def test_the_spread_between_rounds_is_pooled_over_deployments() -> None:
    """Deployment A's rounds decode at 0.1 and 0.2 s/token, B's three at 0.1: log deviations
    +-ln2/2 from A's mean and none from B's, over 1 + 2 degrees of freedom."""
    a = policy_report(_round(0, 0.1) + _round(1, 0.2))
    b = policy_report(_round(0, 0.1) + _round(1, 0.1) + _round(2, 0.1))
    expected = math.sqrt(2 * (math.log(2) / 2) ** 2 / 3)
    assert round_speed_sigma([a, b]) == pytest.approx(expected)
    assert round_speed_sigma([a]) == pytest.approx(math.log(2) / math.sqrt(2))
    assert round_speed_sigma([b]) == 0.0
    assert round_speed_sigma([policy_report(_round(0, 0.1))]) is None  # one round
    assert round_speed_sigma([]) is None
