"""A local prompt's intake at its replica (`CpuHost.local_intake_per_token_s`), fitted on a
run's aggregated deployment, whose engines prefill prompts of both lengths themselves: the
fitted intake brings the long prompts' hops to the run's, and a deployment whose local
prompts are all of one length keeps the profile's."""

from __future__ import annotations

import pytest

from pdserve.bench.report import PolicyReport
from pdserve.sim.fit_engine import PREFILL_FACTOR_RUNS, fit_local_intake_per_token
from pdserve.sim.predict import predict
from pdserve.sim.profile import SimProfile
from tests.unit.sim.helpers import (
    LOCAL_PROFILE,
    RUN_WORKLOAD,
    TRUTH_HOST,
    local_layouts,
    measured_run,
)

LAYOUTS = local_layouts("aggregated", "1p1d")


def _hops_p50_s(m: PolicyReport | None, profile: SimProfile | None = None) -> float:
    """The long class's decode_hops p50 on aggregated: measured (`m`), or simulated with
    `profile` pooled as the fit pools it."""
    if profile is not None:
        pooled = predict(
            "aggregated", LAYOUTS["aggregated"], profile, RUN_WORKLOAD, runs=PREFILL_FACTOR_RUNS
        )
        stats = (pooled.classes["long"].stages or {})["decode_hops"]
    else:
        assert m is not None
        stats = ((m.classes or {})["long"].stages or {})["decode_hops"]
    assert stats.p50_s is not None
    return stats.p50_s


def test_the_fitted_intake_gives_the_aggregated_long_prompts_their_hops() -> None:
    """The run's host takes 6 us per token in: the long prompts' hops on aggregated are far
    above what the host without an intake simulates; the fitted intake brings them back."""
    measured = measured_run().policies["aggregated"]
    without = LOCAL_PROFILE.with_host(TRUTH_HOST.model_copy(update={"local_intake_per_token_s": 0}))
    fitted_s = fit_local_intake_per_token(without, LAYOUTS["aggregated"], RUN_WORKLOAD, measured)
    assert fitted_s == pytest.approx(TRUTH_HOST.local_intake_per_token_s, rel=0.5)
    target_s = _hops_p50_s(measured)
    assert _hops_p50_s(None, without) < 0.8 * target_s
    with_fit = without.with_host_terms(local_intake_per_token_s=fitted_s)
    assert _hops_p50_s(None, with_fit) == pytest.approx(target_s, rel=0.15)


def test_no_intake_is_fitted_without_local_classes_of_different_lengths() -> None:
    """1P1D's local classes are its short prompts alone (the long ones prefill remotely):
    nothing to tell a per-token intake from, so the profile's is kept."""
    profile = LOCAL_PROFILE.with_host_terms(local_intake_per_token_s=3e-6)
    measured = measured_run().policies["1p1d"]
    kept = fit_local_intake_per_token(profile, LAYOUTS["1p1d"], RUN_WORKLOAD, measured)
    assert kept == 3e-6
