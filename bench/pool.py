"""Several `pdserve bench --json` runs of one workload and one set of deployments as one run
(pure): their rounds one after another, every percentile recomputed over all their requests
from the requests the reports kept. For `pdserve tune --fit-on RUN --fit-on RUN2`: a fit on
pilots benched at different times stands on more of the host's minutes (on this project's
VM two pilots twenty minutes apart differed by about the bound on a p50; notes in the git
history of bench/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pdserve.bench.config import BenchConfig
from pdserve.bench.models import PhaseOutcome
from pdserve.bench.report import BenchReport, PolicyReport, build_policy_report, request_result

RUN_ONLY_OPTIONS = ("seed", "rounds", "json_path")
"""Bench options that may differ between pooled runs: each run's own draw, round count and
file. Every other option (the workload, the deployments) must be the same."""


def pool_runs(reports: Sequence[BenchReport]) -> BenchReport:
    """One report of `reports` in order: per deployment, the requests of every run's rounds
    (round indices offset so they stay apart), the metrics, classes and stages rebuilt from
    them as the bench builds them, the wall time summed, no ratios. The config is the first
    run's with `rounds` the total (its `seed` is the first run's: a simulation of the pooled run
    draws the workload from it). Raises ValueError when the runs differ in an option other than
    RUN_ONLY_OPTIONS, measured different deployments, did not keep their requests, were
    interrupted, or are agent runs (their per-step records are not kept per request)."""
    if not reports:
        raise ValueError("no runs to pool")
    first = reports[0]
    if len(reports) == 1:
        return first
    _check_same(reports)
    cfg = BenchConfig.model_validate(
        {**first.config, "deployments": (), "policies": (), "json_path": None}
    )
    policies = {
        name: _pool_policy([r.policies[name] for r in reports], name, cfg)
        for name in first.policies
    }
    rounds = max(p.num_phases for p in policies.values())
    return first.model_copy(
        update={
            "config": {**first.config, "rounds": rounds},
            "policies": policies,
            "ratios": {},
            "notes": [*first.notes, f"pooled from {len(reports)} runs ({rounds} rounds)"],
        }
    )


def _check_same(reports: Sequence[BenchReport]) -> None:
    first = reports[0]
    shared = _shared_options(first.config)
    if any(r.interrupted for r in reports):
        raise ValueError("an interrupted run cannot be pooled")
    for i, r in enumerate(reports[1:], start=2):
        other = _shared_options(r.config)
        differ = sorted(k for k in shared.keys() | other.keys() if shared.get(k) != other.get(k))
        if differ:
            raise ValueError(
                f"run {i} differs from run 1 in {', '.join(differ)}: only runs of the same "
                f"workload and deployments can be pooled ({', '.join(RUN_ONLY_OPTIONS)} may "
                "differ)"
            )
        if set(r.policies) != set(first.policies):
            raise ValueError(
                f"run {i} measured {', '.join(r.policies)}, run 1 {', '.join(first.policies)}"
            )
    if first.config.get("workload") == "agent":
        raise ValueError("agent runs cannot be pooled (their step records are per run)")
    for r in reports:
        for name, p in r.policies.items():
            if not p.requests:
                raise ValueError(f"{name}: a run kept no requests to pool")


def _shared_options(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in RUN_ONLY_OPTIONS}


def _pool_policy(runs: Sequence[PolicyReport], name: str, cfg: BenchConfig) -> PolicyReport:
    """The deployment's requests of every run as phases of one run. A run's wall time is split
    evenly over its rounds (the reports keep only its total, and only the total counts)."""
    phases: list[PhaseOutcome] = []
    offset = 0
    for run in runs:
        records = run.requests or []
        rounds = 1 + max(q.round_index for q in records)
        for k in range(rounds):
            results = tuple(
                request_result(i, q) for i, q in enumerate(records) if q.round_index == k
            )
            phases.append(PhaseOutcome(name, offset + k, results, run.wall_s / rounds))
        offset += rounds
    return build_policy_report(phases, cfg)
