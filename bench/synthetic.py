"""The `synthetic` workload: input/output lengths drawn from distributions (pure)."""

from __future__ import annotations

import random

from pdserve.bench.config import BenchConfig
from pdserve.bench.distributions import poisson_arrivals
from pdserve.bench.limits import apply_limits
from pdserve.bench.models import RequestSpec, WorkloadPlan
from pdserve.bench.prompts import PromptFactory

CLASS = "synthetic"


def sample_lengths(cfg: BenchConfig) -> list[tuple[int, int]]:
    """(input, output) lengths of every request, from `cfg.seed` only."""
    rng = random.Random(f"{cfg.seed}:synthetic:lengths")
    inputs, outputs = cfg.input_distribution, cfg.output_distribution
    return [(inputs.sample(rng), outputs.sample(rng)) for _ in range(cfg.num_requests)]


def build_synthetic(cfg: BenchConfig, factory: PromptFactory) -> WorkloadPlan:
    lengths = sample_lengths(cfg)
    arrivals: list[float | None] = [None] * len(lengths)
    if cfg.request_rate is not None:
        rng = random.Random(f"{cfg.seed}:synthetic:arrivals")
        arrivals = list(poisson_arrivals(len(lengths), cfg.request_rate, rng))
    specs: list[RequestSpec] = []
    clipped_in = clipped_out = skipped = 0
    for i, ((n_in, n_out), arrival) in enumerate(zip(lengths, arrivals, strict=True)):
        limited = apply_limits(cfg, n_in, n_out)
        if limited is None:
            skipped += 1
            continue
        clipped_in += limited.input_clipped
        clipped_out += limited.output_clipped
        specs.append(
            RequestSpec(
                index=i,
                request_class=CLASS,
                max_tokens=limited.output_tokens,
                target_prompt_tokens=limited.input_tokens,
                prompt=factory.unique(f"synthetic:{i}", limited.input_tokens),
                arrival_s=arrival,
            )
        )
    return WorkloadPlan(
        specs=tuple(specs),
        num_input_clipped=clipped_in,
        num_output_clipped=clipped_out,
        num_skipped=skipped,
    )
