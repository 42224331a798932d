"""`OverloadConfig`: every option of `pdserve bench-overload`, validated (pydantic v2, pure)."""

from __future__ import annotations

import pathlib
from typing import Self

from pydantic import Field, model_validator

from pdserve.bench.config import REPORT_DIR_DESCRIPTION, BenchConfig
from pdserve.router.policy.strict import StrictModel


class OverloadConfig(StrictModel):
    """The run configuration; written as `config` into the JSON report."""

    url: str = Field(default="http://127.0.0.1:8000", description="Server base URL (no /v1).")
    model: str | None = Field(default=None, description="Model id; None: first of /v1/models.")
    seed: int = Field(default=0, description="Seed of the workload's random choices.")
    concurrency_levels: tuple[int, ...] = Field(
        default=(32, 320),
        description="Closed-loop clients per level; the first is the saturation point the "
        "others are compared with (32 is the local CPU cluster's).",
    )
    num_requests: int = Field(
        default=200, gt=0, description="Distinct requests per level (a retried 429 is one)."
    )
    output_tokens: int = Field(default=32, gt=0, description="max_tokens of every request.")
    short_tokens: int = Field(default=50, gt=0, description="Prompt tokens of a short request.")
    long_tokens: int = Field(default=1500, gt=0, description="Prompt tokens of a long request.")
    long_fraction: float = Field(default=0.5, ge=0, le=1, description="Share of long requests.")
    burst_size: int = Field(default=4, gt=0, description="Long requests sent back-to-back.")
    warmup: int = Field(default=2, ge=0, description="Unmeasured requests before the first level.")
    request_timeout_s: float = Field(
        default=660.0,
        gt=0,
        description="Client time limit per attempt; an attempt that reaches it is a hang "
        "(keep it above the server's whole-request deadline).",
    )
    max_attempts: int = Field(
        default=100, gt=0, description="Attempts per request (a 429 is retried) before giving up."
    )
    max_retry_wait_s: float = Field(
        default=10.0, gt=0, description="Longest Retry-After the clients honour before resending."
    )
    max_reject_s: float = Field(
        default=1.0, gt=0, description="Check: 429 latency p99 within this many seconds."
    )
    max_ttft_p99_ratio: float = Field(
        default=2.0,
        gt=0,
        description="Check: admitted TTFT p99 at each level within this multiple of the first's.",
    )
    health_probes_per_s: float = Field(
        default=5.0,
        ge=0,
        description="GET /health probes per second during each level (a fixed rate, each on "
        "its own connection), reported beside the 429 latency; 0: none.",
    )
    max_reject_health_ratio: float = Field(
        default=2.0,
        gt=0,
        description="Check: 429 latency p95 within this multiple of the /health probes' p95 "
        "during the same level.",
    )
    json_path: pathlib.Path | None = Field(default=None, description="Write the JSON report.")
    report_dir: pathlib.Path | None = Field(default=None, description=REPORT_DIR_DESCRIPTION)

    @model_validator(mode="after")
    def _levels(self) -> Self:
        if len(self.concurrency_levels) < 2 or any(c < 1 for c in self.concurrency_levels):
            raise ValueError(
                f"--levels needs at least two positive client counts, got {self.concurrency_levels}"
            )
        return self

    def workload(self) -> BenchConfig:
        """The `mixed` workload each level sends (the same lengths at every level)."""
        return BenchConfig(
            url=self.url,
            model=self.model,
            seed=self.seed,
            workload="mixed",
            num_requests=self.num_requests,
            concurrency=max(self.concurrency_levels),
            output_tokens=self.output_tokens,
            short_tokens=self.short_tokens,
            long_tokens=self.long_tokens,
            long_fraction=self.long_fraction,
            burst_size=self.burst_size,
            warmup=self.warmup,
            request_timeout_s=self.request_timeout_s,
        )
