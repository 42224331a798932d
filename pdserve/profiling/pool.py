"""Pool the samples of several `pdserve profile` runs (pure but for `read_report`'s file).

A profile takes seconds, so it measures the host of one moment. On a shared CPU host the
engines' idle speed wanders by more than its fit error between moments: three profiles of one VM
within two hours fitted decode steps 1.7x apart at 16 sequences, while the loaded runs after
them served alike (measured on this project's VM; the notes are in the git history of
bench/RESULTS.md). Fitting one model on the samples of
several profiles taken at different times averages the moments out. `pdserve profile --pool
EARLIER.json` reads earlier runs' `--json` reports with `read_report` and fits on `pooled`.
"""

from __future__ import annotations

import json
import pathlib
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pdserve.profiling.samples import LocalPrefillSample, ServingSample
from pdserve.profiling.yaml_edit import rounded
from pdserve.router.policy.cost_model import CostModel, DecodeSample, FitResult, PrefillSample


@dataclass(frozen=True, slots=True)
class ProfileSamples:
    """The samples of one profile run: what `CostModel.fit` and the simulator profile's fit
    take. `serving` is empty in reports written before `--pool` existed, `local_prefill` in
    those written before the profile sent local prefills."""

    source: str
    model: str
    prefill: tuple[PrefillSample, ...]
    decode: tuple[DecodeSample, ...]
    local_prefill: tuple[LocalPrefillSample, ...] = ()
    serving: tuple[ServingSample, ...] = ()

    def largest_batch_step_s(self) -> tuple[int, float] | None:
        """(batch size, its median step) of the largest decode batch measured: one number
        to compare profiles by. None without decode samples."""
        if not self.decode:
            return None
        size = max(s.batch_size for s in self.decode)
        return size, statistics.median(s.step_s for s in self.decode if s.batch_size == size)


def read_report(path: pathlib.Path) -> ProfileSamples:
    """The samples of a `pdserve profile --json` report. ValueError naming the file when it
    cannot be read or is not such a report."""
    try:
        doc = json.loads(path.read_text())
        return ProfileSamples(
            source=str(path),
            model=str(doc["model"]),
            prefill=tuple(PrefillSample(**s) for s in doc["prefill_samples"]),
            decode=tuple(_decode(s) for s in doc["decode_samples"]),
            local_prefill=tuple(
                LocalPrefillSample(**s) for s in doc.get("local_prefill_samples", ())
            ),
            serving=tuple(ServingSample(**s) for s in doc.get("serving_samples", ())),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a `pdserve profile --json` report ({exc})") from exc


def _decode(sample: dict[str, Any]) -> DecodeSample:
    return DecodeSample(
        batch_size=int(sample["batch_size"]),
        context_tokens=int(sample["context_tokens"]),
        step_s=float(sample["step_s"]),
    )


def pooled(runs: Sequence[ProfileSamples]) -> ProfileSamples:
    """One set of samples from all of `runs` (the first names the pool). ValueError when no
    runs are given or they profiled different models: their engines' times do not mix."""
    if not runs:
        raise ValueError("nothing to pool")
    models = {r.model for r in runs}
    if len(models) > 1:
        named = ", ".join(f"{r.source}: {r.model!r}" for r in runs)
        raise ValueError(f"the profiles measured different models ({named})")
    return ProfileSamples(
        source=" + ".join(r.source for r in runs),
        model=runs[0].model,
        prefill=tuple(s for r in runs for s in r.prefill),
        decode=tuple(s for r in runs for s in r.decode),
        local_prefill=tuple(s for r in runs for s in r.local_prefill),
        serving=tuple(s for r in runs for s in r.serving),
    )


def fit_cost_model(samples: ProfileSamples, base: CostModel) -> FitResult:
    """The cost model `pdserve profile` fits on `samples` (this run's or a pool's), rounded
    as the config file gets it; `base` gives the coefficients the samples cannot determine.
    ValueError when the samples cannot determine the model."""
    fit = CostModel.fit(samples.prefill, samples.decode, base=base)
    return FitResult(model=rounded(fit.model), notes=fit.notes)
