"""Cost model: defaults are monotone, fit recovers known coefficients, clamps negatives."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from pdserve.router.policy import CostModel, DecodeSample, PrefillSample


@pytest.mark.parametrize(
    ("smaller", "larger"),
    [
        ((0, 0), (1, 0)),
        ((100, 0), (1000, 0)),
        ((1000, 0), (4096, 0)),
        ((500, 0), (500, 3000)),  # same new tokens, more context to attend to
        ((500, 3000), (3500, 0)),  # reuse beats recomputing the same total
    ],
)
def test_default_prefill_estimate_is_monotone(
    smaller: tuple[int, int], larger: tuple[int, int]
) -> None:
    cm = CostModel()
    assert cm.est_prefill_s(*smaller) < cm.est_prefill_s(*larger)


def test_default_prefill_estimate_is_demo_scale() -> None:
    cm = CostModel()
    assert cm.est_prefill_s(0, 0) == pytest.approx(0.02)
    assert 0.3 < cm.est_prefill_s(4096, 0) < 1.0


@pytest.mark.parametrize(
    ("smaller", "larger"),
    [((1, 0), (2, 0)), ((8, 1000), (8, 100_000)), ((1, 100_000), (64, 100_000))],
)
def test_default_decode_step_is_monotone(smaller: tuple[int, int], larger: tuple[int, int]) -> None:
    cm = CostModel()
    assert cm.est_decode_step_s(*smaller) < cm.est_decode_step_s(*larger)


def test_negative_coefficient_is_rejected() -> None:
    with pytest.raises(ValidationError, match="per_token_s"):
        CostModel(per_token_s=-1e-4)


TRUE = CostModel(
    fixed_overhead_s=0.03,
    per_token_s=2e-4,
    per_token_sq_s=3e-8,
    decode_base_s=0.012,
    decode_per_seq_s=7e-4,
    decode_per_context_token_s=2e-7,
)


def _prefill_samples(model: CostModel, noise: float, rng: random.Random) -> list[PrefillSample]:
    out = []
    for u in (16, 64, 256, 512, 1024, 2048, 4096):
        for c in (0, 512, 2048):
            t = model.est_prefill_s(u, c) * (1 + rng.uniform(-noise, noise))
            out.append(PrefillSample(u, c, t))
    return out


def _decode_samples(model: CostModel, noise: float, rng: random.Random) -> list[DecodeSample]:
    out = []
    for b in (1, 4, 16, 64):
        for ctx_per_seq in (128, 1024, 4096):
            ctx = b * ctx_per_seq
            t = model.est_decode_step_s(b, ctx) * (1 + rng.uniform(-noise, noise))
            out.append(DecodeSample(b, ctx, t))
    return out


@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_fit_recovers_known_coefficients(noise: float) -> None:
    rng = random.Random(7)
    result = CostModel.fit(_prefill_samples(TRUE, noise, rng), _decode_samples(TRUE, noise, rng))
    for name, want in TRUE.model_dump().items():
        assert getattr(result.model, name) == pytest.approx(want, rel=0.05), name
    assert result.notes == ()


def test_fit_clamps_negative_coefficient_and_says_so() -> None:
    # Time that falls with length (impossible, e.g. a warm-up artefact) on the linear term.
    samples = [PrefillSample(u, 0, 0.5 - 1e-4 * u + 1e-8 * u * u / 2) for u in (0, 500, 1000, 2000)]
    result = CostModel.fit(samples, [])
    assert result.model.per_token_s == 0.0
    assert result.model.fixed_overhead_s >= 0 and result.model.per_token_sq_s >= 0
    assert any("per_token_s fitted negative" in n for n in result.notes)
    assert any("no decode samples" in n for n in result.notes)
    assert result.model.decode_base_s == CostModel().decode_base_s


def test_fit_without_samples_keeps_base() -> None:
    result = CostModel.fit([], [], base=TRUE)
    assert result.model == TRUE
    assert len(result.notes) == 2


@pytest.mark.parametrize(
    ("samples", "match"),
    [
        ([PrefillSample(10, 0, 0.1), PrefillSample(20, 0, 0.2)], "at least 3 samples"),
        ([PrefillSample(100, 0, 0.1)] * 5, "vary the inputs"),
    ],
)
def test_fit_rejects_undetermined_samples(samples: list[PrefillSample], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CostModel.fit(samples, [])


def test_fit_keeps_short_prompts_in_relative_error_when_long_ones_run_slow() -> None:
    """Profile-shaped samples: three repeats per length at +-15 %, and the longest prompts
    20 % slower on top (a busy host phase). Least squares on seconds would let the 3,072-token
    samples lift the intercept, and a 50-token prompt would come out about 1.55x its time; on
    relative residuals every length stays near its own samples."""
    true = CostModel(fixed_overhead_s=0.004, per_token_s=2e-5, per_token_sq_s=1.3e-8)
    samples = [
        PrefillSample(u, 0, true.est_prefill_s(u, 0) * f * (1.2 if u == 3072 else 1.0))
        for u in (128, 256, 512, 1024, 2048, 3072)
        for f in (0.85, 1.0, 1.15)
    ]
    model = CostModel.fit(samples, []).model
    for u, tol in ((50, 0.06), (128, 0.05), (256, 0.06), (1024, 0.06)):
        assert model.est_prefill_s(u, 0) / true.est_prefill_s(u, 0) == pytest.approx(1, abs=tol)


def test_fit_leaves_out_samples_with_no_time_and_says_so() -> None:
    samples = [PrefillSample(u, 0, 0.01 + 1e-5 * u) for u in (100, 200, 400)]
    result = CostModel.fit([*samples, PrefillSample(800, 0, 0.0)], [])
    assert result.model.fixed_overhead_s == pytest.approx(0.01)
    assert result.model.per_token_s == pytest.approx(1e-5)
    assert any("1 sample(s) with no measured time" in n for n in result.notes)
    with pytest.raises(ValueError, match="with a positive time"):
        CostModel.fit([*samples[:2], PrefillSample(800, 0, 0.0)], [])


def test_the_queue_estimate_counts_attention_as_if_the_prompts_were_equal() -> None:
    """A lower bound: however the engine's queued tokens split between its prompts, their
    attention is at least that of an even split."""
    cost = CostModel(fixed_overhead_s=0.0, per_token_s=0.0, per_token_sq_s=1e-8)
    even = cost.est_backlog_s(4000, 2)
    assert even == pytest.approx(2 * cost.est_prefill_s(2000, 0))
    assert even <= cost.est_prefill_s(3000, 0) + cost.est_prefill_s(1000, 0)
    assert cost.est_backlog_s(4000, 0) == 0.0  # tokens without prompts: nothing to split
