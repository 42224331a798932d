"""`pdserve profile`'s pure parts: the plan, samples from the router's headers, report rows
and the noisy-fit warning. The YAML edit is in test_profile_yaml.py, the whole command against
a mock router in test_profile_cli.py."""

from __future__ import annotations

import random

import pytest

from pdserve.profiling import plan as P
from pdserve.profiling import report as R
from pdserve.profiling import samples as S
from pdserve.router.policy.cost_model import CostModel, DecodeSample, PrefillSample
from tests.unit import profiling_helpers as H
from tests.unit.profiling_helpers import FIT

ALL = P.FULL_PREFILL_TOKENS


@pytest.mark.parametrize(
    ("quick", "cap", "ctx", "min_extra", "min_prompt", "lengths", "pairs"),
    [
        (False, 3000, 8192, 0, 0, (*ALL[:5], 3000), P.FULL_CACHED_PAIRS),
        (False, 5000, 4096, 0, 0, ALL, P.FULL_CACHED_PAIRS),
        (False, 3000, 2048, 0, 0, (*ALL[:4], 2047), ((1024, 512),)),
        (False, 3000, 8192, 600, 0, (*ALL[:5], 3000), ((1024, 600), (1024, 1024), (2048, 600))),
        (False, 3000, 8192, 1024, 0, (*ALL[:5], 3000), ((1024, 1024),)),
        (True, 3000, 8192, 256, 0, (64, 512, 2048), ((1024, 512),)),
        (True, 1000, 8192, 0, 0, (64, 512, 1000), ()),
        # deploy/local.yaml's cold threshold: 64-token prompts would prefill on decode
        (False, 3000, 8192, 0, 128, (128, *ALL[1:5], 3000), P.FULL_CACHED_PAIRS),
        (True, 3000, 8192, 0, 600, (600, 2048), ((1024, 512),)),
    ],
)
def test_make_plan_caps_and_filters(quick, cap, ctx, min_extra, min_prompt, lengths, pairs) -> None:  # type: ignore[no-untyped-def]
    plan = P.make_plan(quick=quick, repeats=2, max_prompt_tokens=cap, max_model_len_tokens=ctx,
                       min_extra_tokens=min_extra, min_prompt_tokens=min_prompt)  # fmt: skip
    assert plan.prefill_tokens == lengths
    assert plan.cached_pairs == pairs
    batch = sum(b + 1 for b in plan.decode_batch_sizes) * len(plan.decode_prompt_tokens)
    per_repeat = len(lengths) + 2 * len(plan.cached_pairs) + batch
    beside = 1 if plan.local_prefill_tokens else 0  # one local prefill joins each batch
    per_repeat += len(plan.local_prefill_tokens) + beside * len(plan.decode_batch_sizes) * len(
        plan.decode_prompt_tokens
    )
    assert plan.num_requests() == P.WARMUP_REQUESTS + 2 * per_repeat


@pytest.mark.parametrize(
    ("cold", "local"), [(0, ()), (1, ()), (20, (19,)), (64, (32,)), (128, (32, 64, 96))]
)
def test_make_plan_sends_local_prefills_under_the_cold_threshold(
    cold: int, local: tuple[int, ...]
) -> None:
    plan = P.make_plan(quick=True, repeats=1, max_prompt_tokens=3000,
                       max_model_len_tokens=8192, min_prompt_tokens=cold)  # fmt: skip
    assert plan.local_prefill_tokens == local


@pytest.mark.parametrize(("repeats", "cap"), [(0, 3000), (1, 100)])
def test_make_plan_rejects(repeats: int, cap: int) -> None:
    with pytest.raises(ValueError):
        P.make_plan(quick=True, repeats=repeats, max_prompt_tokens=cap, max_model_len_tokens=8192)


def test_prompts_are_seeded_in_range_and_decode_batches_share_only_a_prefix() -> None:
    a, b = P.random_tokens(random.Random(1), 500), P.random_tokens(random.Random(1), 500)
    assert a == b and all(10 <= t < 1000 for t in a)
    prefix, prompts = P.decode_batch_prompts(random.Random(2), 4, 128)
    assert len(prefix) == 96 and all(len(p) == 128 and p[:96] == prefix for p in prompts)
    assert len({tuple(p[96:]) for p in prompts}) == 4


@pytest.mark.parametrize(
    ("timing", "decision", "body", "sent", "expected"),
    [
        ({"prefill": 0.1}, {"cached_tokens": 0}, H.usage(512, 0), 512, (512, 0, 0.1)),
        ({"prefill": 0.05}, {"cached_tokens": 999}, H.usage(1536, 1024), 1536, (512, 1024, 0.05)),
        ({"prefill": 0.05}, {"cached_tokens": 1024}, H.usage(1536, None), 1536, (512, 1024, 0.05)),
        ({"prefill": 0.02}, None, {}, 64, (64, 0, 0.02)),
        ({"kv_transfer": 0.01}, {"cached_tokens": 1024}, H.usage(1124, 1024), 1124, None),
    ],
)
def test_prefill_sample_from_headers(timing, decision, body, sent, expected) -> None:  # type: ignore[no-untyped-def]
    sample = S.prefill_sample(H.headers(timing, decision), body, sent)
    assert sample == (None if expected is None else PrefillSample(*expected))


@pytest.mark.parametrize(
    ("headers", "match"),
    [({}, "no x-pdserve-timing"), ({S.TIMING_HEADER: "{oops"}, "not JSON"),
     ({S.TIMING_HEADER: "[1]"}, "not a JSON object")],
)  # fmt: skip
def test_prefill_sample_rejects_bad_headers(headers: dict[str, str], match: str) -> None:
    with pytest.raises(S.ProfileError, match=match):
        S.prefill_sample(headers, {}, 10)


@pytest.mark.parametrize(
    ("first", "last", "n", "expected"),
    [(1.0, 1.63, 64, 0.01), (1.0, 1.0, 1, None), (2.0, 1.0, 3, 0.0), (0.0, 0.5, 2, 0.5)],
)
def test_tpot(first: float, last: float, n: int, expected: float | None) -> None:
    assert S.tpot_s(first, last, n) == pytest.approx(expected)


def test_decode_batch_sample_is_the_median_with_batch_total_context() -> None:
    batch = S.DecodeBatch(4, 1024, 64, (0.010, 0.012, 0.011, 0.030))
    assert batch.sample() == DecodeSample(4, 4 * 1056, pytest.approx(0.0115))
    with pytest.raises(S.ProfileError, match="no stream"):
        S.DecodeBatch(2, 128, 64, ()).sample()


@pytest.mark.parametrize(
    ("pred", "meas", "err"), [(1.5, 1.0, 0.5), (0.5, 1.0, -0.5), (0.0, 0.0, 0.0), (1.0, 0.0, None)]
)
def test_rel_error(pred: float, meas: float, err: float | None) -> None:
    assert R.rel_error(pred, meas) == (float("inf") if err is None else pytest.approx(err))


def test_report_rows_group_by_inputs_and_order() -> None:
    old = CostModel()
    samples = [PrefillSample(512, 1024, 0.03), PrefillSample(64, 0, 0.01),
               PrefillSample(64, 0, 0.03), PrefillSample(64, 0, 0.02)]  # fmt: skip
    rows = R.prefill_rows(samples, old, FIT)
    assert [(r.inputs, r.count, r.measured_s) for r in rows] == [
        ("64 new", 3, 0.02), ("512 new + 1024 cached", 1, 0.03)]  # fmt: skip
    assert rows[0].new_error == pytest.approx(FIT.est_prefill_s(64, 0) / 0.02 - 1)
    drows = R.decode_rows([DecodeSample(8, 1280, 0.02), DecodeSample(1, 160, 0.005)], old, FIT)
    assert [r.inputs for r in drows] == ["B=1, ctx=160", "B=8, ctx=1280"]
    assert R.mean_abs_error_prefill([], old) is None
    assert R.mean_abs_error_decode([DecodeSample(1, 0, 0.01)], CostModel()) == pytest.approx(0.05)


@pytest.mark.parametrize(
    ("error", "warns"), [(None, False), (0.06, False), (0.5, False), (0.51, True), (0.89, True)]
)
def test_noisy_fit_warning_above_half(error: float | None, warns: bool) -> None:
    warning = R.noisy_fit_warning("prefill", error)
    assert bool(warning) is warns
    if warns:
        assert f"by {error * 100:.0f}% on average" in warning  # type: ignore[operator]
