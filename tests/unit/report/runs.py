"""Synthetic runs for the report tests: bench runs built by the bench's own report builder from
request results drawn from a seeded generator (each policy a little faster than the last),
an overload run, and an elastic run's document."""

from __future__ import annotations

import dataclasses
import random

from pdserve.bench.config import BenchConfig
from pdserve.bench.models import PhaseOutcome, RequestResult
from pdserve.bench.overload import LevelOutcome, OverloadReport, build_overload_report
from pdserve.bench.report import BenchReport
from pdserve.bench.report_build import build_report
from tests.artifacts import ROOT


def result(rng: random.Random, index: int, start_s: float, speed: float) -> RequestResult:
    long = rng.random() < 0.2
    prompt = rng.randint(2000, 4000) if long else rng.randint(30, 120)
    prefill_s = speed * prompt * 1e-4
    stages = (
        ("router_queue", 0.002), ("prefill_queue", speed * rng.uniform(0, 0.05)),
        ("prefill", prefill_s), ("kv_transfer", 0.004), ("decode", 0.5),
    )  # fmt: skip
    ttft = sum(s for name, s in stages if name != "decode") + 0.003
    gaps = tuple(rng.lognormvariate(-3.0, 0.3) for _ in range(63))
    return RequestResult(
        index=index, request_class="long" if long else "short", start_s=start_s,
        e2e_s=ttft + sum(gaps), ttft_s=ttft, chunk_gaps_s=gaps, prompt_tokens=prompt,
        completion_tokens=64, cached_tokens=0, text="x", stages=stages,
    )  # fmt: skip


def synthetic_run(
    names: tuple[str, ...] = ("round_robin", "pdserve"),
    num_requests: int = 40,
    *,
    rounds: int = 1,
    deployments: bool = False,
    seed: int = 7,
) -> BenchReport:
    """`num_requests` requests per phase, `rounds` phases per name; `deployments`: the names
    are deployments (`--deployments NAME=...`) rather than policies."""
    rng = random.Random(seed)
    phases = []
    for round_index in range(rounds):
        for k, name in enumerate(names):
            speed = 1.0 - 0.3 * k
            results = tuple(
                result(rng, i, i * 0.05, speed) for i in range(num_requests)
            )  # fmt: skip
            wall_s = max(r.start_s + r.e2e_s for r in results)
            phases.append(PhaseOutcome(name, round_index, results, wall_s))
    configs = ("local-aggregated.yaml", "local.yaml", "local-2p1d.yaml")
    options: dict[str, object] = {"policies": names}
    if deployments:
        options = {"deployments": tuple(
            f"{n}={ROOT / 'deploy' / c}" for n, c in zip(names, configs, strict=False)
        )}  # fmt: skip
    cfg = BenchConfig.model_validate({"num_requests": num_requests, "rounds": rounds, **options})
    return build_report(cfg, "pdserve-demo", None, phases, interrupted=False)


def elastic_doc() -> dict[str, object]:
    """An elastic run: the prefill pool scales 1 → 2 at 20 s and back to 1 at 70 s."""
    samples = [
        {"t_s": float(t), "ready": {"prefill": 2 if 20 <= t < 70 else 1, "decode": 1},
         "target": {"prefill": 2 if 15 <= t < 65 else 1, "decode": 1}}
        for t in range(0, 90, 5)
    ]  # fmt: skip
    requests = [
        {"phase": "prefill-heavy", "start_s": t * 0.5, "ttft_s": 2.0 if t < 40 else 0.8,
         "e2e_s": 2.5, "ok": True}
        for t in range(100)
    ]  # fmt: skip
    return {
        "phases": [
            {
                "name": "prefill-heavy",
                "start_s": 0.0,
                "duration_s": 52.0,
                "requests": 100,
                "failed": 0,
                "ttft_p50_s": 0.8,
                "ttft_p99_s": 2.0,
                "itl_p99_s": 0.05,
            },
            {
                "name": "idle",
                "start_s": 52.0,
                "duration_s": 30.0,
                "requests": 0,
                "failed": 0,
                "ttft_p50_s": None,
                "ttft_p99_s": None,
                "itl_p99_s": None,
            },
        ],
        "changes": [
            {"t_s": 0.0, "pool": "decode", "ready": 1, "target": 1},
            {"t_s": 0.0, "pool": "prefill", "ready": 1, "target": 1},
            {"t_s": 15.0, "pool": "prefill", "ready": 1, "target": 2},
            {"t_s": 20.0, "pool": "prefill", "ready": 2, "target": 2},
            {"t_s": 65.0, "pool": "prefill", "ready": 2, "target": 1},
            {"t_s": 70.0, "pool": "prefill", "ready": 1, "target": 1},
        ],
        "samples": samples,
        "requests": requests,
    }


def overload_run() -> OverloadReport:
    """Two levels: 4 clients all served; 64 clients, 5 of 15 attempts refused with a 429."""
    rng = random.Random(1)
    ok = [result(rng, i, i * 0.1, 1.0) for i in range(10)]
    refused = [
        dataclasses.replace(r, error="HTTP 429", status=429, ttft_s=None)
        for r in (result(rng, 10 + i, 0.5 + i * 0.1, 1.0) for i in range(5))
    ]
    levels = [LevelOutcome(4, 10, tuple(ok), 2.0), LevelOutcome(64, 10, tuple(ok + refused), 2.0)]
    return build_overload_report("http://x", "m", {}, levels, 0.5, 3.0)
