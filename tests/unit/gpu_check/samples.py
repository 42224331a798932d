"""Realistic raw files of one GPU-check run, built with the producers' own code (pure)."""

from __future__ import annotations

from typing import Any

from pdserve.bench.config import BenchConfig
from pdserve.bench.gpu_check.identity import Comparison, report
from pdserve.bench.models import PhaseOutcome, RequestResult
from pdserve.bench.report_build import build_report
from pdserve.kv_transfer.fabric_check.fabric import evaluate
from pdserve.kv_transfer.fabric_check.report import Report, build_row, to_json
from pdserve.kv_transfer.fabric_check.stats import summarize

MIB = 1 << 20


def kv_check_doc(transports: tuple[str, ...] = ("cuda_ipc/cuda",)) -> dict[str, Any]:
    """A `pdserve kv-check --json` document: READ at 4 KiB and 64 MiB."""
    rows = tuple(
        build_row(
            "READ",
            summarize(size, [latency_s] * 10),
            summarize(size, [latency_s / 2] * 10),
            transports,
        )
        for size, latency_s in ((4096, 20e-6), (64 * MIB, 0.002))
    )
    report = Report(
        mode="same-node",
        device="cuda",
        peer=None,
        rows=rows,
        transports=transports,
        transport_detection="ucx log",
        endpoint_transports=transports,
        verdict=evaluate("any", transports, heuristic=False),
        ucx_version="1.19.0",
        duration_s=4.2,
    )
    return to_json(report)


def bench_doc(num_errors: int = 0) -> dict[str, Any]:
    """A `pdserve bench --json` document of 4 mixed requests."""
    cfg = BenchConfig(workload="mixed", num_requests=4, concurrency=2, output_tokens=8)
    results = tuple(
        RequestResult(
            index=i,
            request_class="long" if i % 2 else "short",
            start_s=0.1 * i,
            e2e_s=0.5 + 0.1 * i,
            ttft_s=0.05 + 0.01 * i,
            chunk_gaps_s=(0.01, 0.012, 0.011),
            prompt_tokens=1500 if i % 2 else 50,
            completion_tokens=8,
            cached_tokens=0,
            text="abc",
            error="boom" if i < num_errors else None,
            status=500 if i < num_errors else None,
        )
        for i in range(4)
    )
    phase = PhaseOutcome(policy="default", round_index=0, results=results, wall_s=1.0)
    return build_report(cfg, "pdserve-gpu-check", None, [phase], False).model_dump(mode="json")


def identity_doc(verdicts: tuple[str, ...] = ("identical",) * 4, max_near_ties: int = 2) -> Any:
    """An identity report with one prompt per verdict."""
    comparisons = [
        Comparison(f"p{i}", "chat", False, 100, v, None if v == "identical" else 3, "d")  # type: ignore[arg-type]
        for i, v in enumerate(verdicts)
    ]
    return report(comparisons, kv_transfers=float(len(verdicts)), max_near_ties=max_near_ties)


def steps_lines(failed: dict[str, int] | None = None) -> str:
    """steps.jsonl of a whole run; `failed` maps step names to their exit codes."""
    names = ("env", "model", "config", "kv-check", "up", "identity", "bench", "down")
    lines = []
    for name in names:
        rc = (failed or {}).get(name, 0)
        lines.append(f'{{"step": "{name}", "rc": {rc}, "elapsed_s": 1.5, "timeout_s": 60}}')
    return "\n".join(lines) + "\n"


def metrics_text(num_transfers: int = 4) -> str:
    """Router /metrics with `num_transfers` KV handoffs of 24 MB in 4 ms each."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    registry = CollectorRegistry()
    seconds = Histogram("pdserve_kv_transfer_seconds", "KV transfer time.", registry=registry)
    moved = Histogram("pdserve_kv_transfer_bytes", "KV bytes.", registry=registry)
    for _ in range(num_transfers):
        seconds.observe(0.004)
        moved.observe(24e6)
    return generate_latest(registry).decode()
