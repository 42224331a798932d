"""What `pdserve profile` shows and saves: measured vs predicted per sample point, mean
errors, and the JSON document (pure).

Relative error = (predicted − measured) / measured: positive means the model overestimates.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pdserve.profiling.samples import (
    DecodeBatch,
    LocalPrefillSample,
    ServingSample,
    median_or_none,
)
from pdserve.router.policy.cost_model import CostModel, DecodeSample, PrefillSample


@dataclass(frozen=True, slots=True)
class ReportRow:
    """One sample point (samples with equal inputs grouped): `measured_s` is their median,
    `old_s` / `new_s` the predictions of the config's model and the fitted one."""

    kind: str  # "prefill" | "decode"
    inputs: str
    count: int
    measured_s: float
    old_s: float
    new_s: float

    @property
    def old_error(self) -> float:
        return rel_error(self.old_s, self.measured_s)

    @property
    def new_error(self) -> float:
        return rel_error(self.new_s, self.measured_s)


def rel_error(predicted: float, measured: float) -> float:
    """(predicted − measured) / measured; 0 when both are 0, inf when only measured is."""
    if measured == 0:
        return 0.0 if predicted == 0 else float("inf")
    return (predicted - measured) / measured


def prefill_rows(
    samples: Sequence[PrefillSample], old: CostModel, new: CostModel
) -> list[ReportRow]:
    """One row per (uncached, cached) token pair, ordered by cached then uncached tokens."""
    groups: dict[tuple[int, int], list[float]] = {}
    for s in samples:
        groups.setdefault((s.num_uncached_tokens, s.num_cached_tokens), []).append(s.seconds)
    rows = []
    for (u, c), secs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        label = f"{u} new" + (f" + {c} cached" if c else "")
        rows.append(
            ReportRow(
                "prefill",
                label,
                len(secs),
                statistics.median(secs),
                old.est_prefill_s(u, c),
                new.est_prefill_s(u, c),
            )
        )
    return rows


def decode_rows(samples: Sequence[DecodeSample], old: CostModel, new: CostModel) -> list[ReportRow]:
    """One row per (batch size, context tokens), ordered by batch size then context."""
    groups: dict[tuple[int, int], list[float]] = {}
    for s in samples:
        groups.setdefault((s.batch_size, s.context_tokens), []).append(s.step_s)
    rows = []
    for (b, ctx), steps in sorted(groups.items()):
        rows.append(
            ReportRow(
                "decode",
                f"B={b}, ctx={ctx}",
                len(steps),
                statistics.median(steps),
                old.est_decode_step_s(b, ctx),
                new.est_decode_step_s(b, ctx),
            )
        )
    return rows


def mean_abs_error_prefill(samples: Sequence[PrefillSample], model: CostModel) -> float | None:
    """Mean |relative error| of `model` over every prefill sample; None for none."""
    errs = [
        abs(rel_error(model.est_prefill_s(s.num_uncached_tokens, s.num_cached_tokens), s.seconds))
        for s in samples
    ]
    return statistics.fmean(errs) if errs else None


def mean_abs_error_decode(samples: Sequence[DecodeSample], model: CostModel) -> float | None:
    """Mean |relative error| of `model` over every decode sample; None for none."""
    errs = [
        abs(rel_error(model.est_decode_step_s(s.batch_size, s.context_tokens), s.step_s))
        for s in samples
    ]
    return statistics.fmean(errs) if errs else None


POOL_DRIFT_WARN = 0.25
"""How far this run's decode samples may sit from the pooled fit (mean |relative error|)
before `pdserve profile --pool` warns. On this project's VM (notes in the git history of
bench/RESULTS.md) seven successive profiles sat 11-23 % off the pools they were fitted into.
Two went further, for the two different reasons the warning names: one, 35 % fast, caught the
engines at an odd moment (the run then served as the pool said), and another, 27 % slow,
caught a slow host that stayed slow through the run, so every prediction from the pool came
out too fast."""


def pool_drift_warning(this_run: Sequence[DecodeSample], model: CostModel) -> str:
    """A warning when this run's decode samples are more than POOL_DRIFT_WARN off the pooled
    `model` on average, saying whether this run's steps were slower or faster ('' otherwise,
    or with no samples)."""
    error = mean_abs_error_decode(this_run, model)
    if error is None or error <= POOL_DRIFT_WARN:
        return ""
    signed = statistics.median(
        rel_error(s.step_s, model.est_decode_step_s(s.batch_size, s.context_tokens))
        for s in this_run
    )
    way = "slower" if signed > 0 else "faster"
    return (
        f"this run's decode steps are {error * 100:.0f}% off the pooled fit ({way} than it). "
        "Either this profile caught the host at an odd moment, or the host is not as it was "
        "on the pooled runs. Profile again in a few minutes: if this run's samples stay off "
        f"the pool, expect a run benched now to come out {way} than the pooled profile "
        "predicts: bench your layouts now (`pdserve bench --deployments ... --rounds 2 --json "
        "pilot.json`) and fit the CPU host on that run (`pdserve tune --fit-on pilot.json`)"
    )


NOISY_FIT_ERROR = 0.5
"""A fitted model whose mean |relative error| over its own samples exceeds this was fitted on
a busy host (on this project's VM, notes in the git history of bench/RESULTS.md: quiet
profiles fit within 6-17 %, two taken while the host was busy missed their prefill samples by
89 %, and the busy one predicted fewer cells of the run after it than a quiet one of an hour
before)."""


def noisy_fit_warning(label: str, fitted_error: float | None) -> str:
    """A warning when the fitted `label` model misses its own samples by more than
    NOISY_FIT_ERROR on average ('' otherwise, or with no samples)."""
    if fitted_error is None or fitted_error <= NOISY_FIT_ERROR:
        return ""
    return (
        f"the fitted {label} model misses its own samples by {fitted_error * 100:.0f}% on "
        f"average (a quiet host fits within {NOISY_FIT_ERROR * 100:.0f}%): other work was "
        "probably running on the engines' cores while profiling; profile again on a quiet "
        "host before simulating or tuning with it"
    )


def report_json(
    *,
    url: str,
    model_id: str,
    config: str | None,
    prefill: Sequence[PrefillSample],
    batches: Sequence[DecodeBatch],
    old: CostModel,
    new: CostModel,
    notes: Sequence[str],
    skipped_local_prefills: int,
    local_prefill: Sequence[LocalPrefillSample] = (),
    serving: Sequence[ServingSample] = (),
    pooled_with: Sequence[str] = (),
) -> dict[str, Any]:
    """The `--json` document: inputs, this run's raw samples, both coefficient sets, both
    models' errors over this run's samples, notes. `pooled_with`: the earlier reports whose
    samples the new coefficients were also fitted on (their samples are not repeated here)."""
    decode = [b.sample() for b in batches]
    return {
        "url": url,
        "model": model_id,
        "config": config,
        "prefill_samples": [asdict(s) for s in prefill],
        "decode_samples": [
            {
                **asdict(b.sample()),
                "prompt_tokens": b.prompt_tokens,
                "output_tokens": b.output_tokens,
                "client_tpot_s": list(b.client_tpot_s),
                "router_tpot_s_median": median_or_none(b.router_tpot_s),
            }
            for b in batches
        ],
        "skipped_local_prefills": skipped_local_prefills,
        "local_prefill_samples": [asdict(s) for s in local_prefill],
        "serving_samples": [asdict(s) for s in serving],
        "pooled_with": list(pooled_with),
        "old_cost_model": old.model_dump(),
        "cost_model": new.model_dump(),
        "mean_abs_rel_error": {
            "prefill_old": mean_abs_error_prefill(prefill, old),
            "prefill_new": mean_abs_error_prefill(prefill, new),
            "decode_old": mean_abs_error_decode(decode, old),
            "decode_new": mean_abs_error_decode(decode, new),
        },
        "fit_notes": list(notes),
    }
