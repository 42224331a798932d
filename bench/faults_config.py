"""`FaultsConfig`: every option of `pdserve bench-faults`, validated (pydantic v2, pure)."""

from __future__ import annotations

import pathlib

from pydantic import Field

from pdserve.bench.config import REPORT_DIR_DESCRIPTION
from pdserve.bench.faults import FAULTS, FaultName
from pdserve.router.policy.strict import StrictModel


class FaultsConfig(StrictModel):
    """The run configuration; written as `config` into the JSON report."""

    url: str = Field(default="http://127.0.0.1:8000", description="Router base URL (no /v1).")
    model: str | None = Field(default=None, description="Model id; None: first of /v1/models.")
    ray_port: int | None = Field(
        default=None,
        description="Ray port of the local cluster whose engines are faulted; None: "
        "PDSERVE_RAY_PORT or 6390, as `pdserve up` uses.",
    )
    faults: tuple[FaultName, ...] = Field(
        default=FAULTS, description="Faults to inject, one run each, in this order."
    )
    clients: int = Field(default=4, gt=0, description="Concurrent streams of the steady load.")
    rate_per_s: float = Field(
        default=4.0,
        gt=0,
        description="Requests per second the load sends at most (paced per client): a steady "
        "load with headroom, so a replacement engine can start while it runs.",
    )
    prompt_words: int = Field(default=200, gt=0, description="Prompt words per load request.")
    output_tokens: int = Field(default=32, gt=0, description="max_tokens per load request.")
    stream_tokens: int = Field(
        default=1000,
        gt=0,
        description="kill-decode: max_tokens of the load, so the kill lands mid-stream.",
    )
    policy: str | None = Field(
        default="round_robin",
        description="x-pdserve-policy of the load (needs router.allow_policy_override); "
        "round_robin spreads it over every replica, so the faulted one has work. None: the "
        "deployment's policy.",
    )
    warmup_s: float = Field(default=5.0, ge=0, description="Load before the fault.")
    tail_s: float = Field(default=5.0, ge=0, description="Load after recovery.")
    recover_timeout_s: float = Field(
        default=240.0, gt=0, description="Longest wait for recovery after a fault."
    )
    request_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="Client limit per request; one that reaches it is lost (a hang).",
    )
    gone_prompt_words: int = Field(
        default=1500, gt=0, description="client-gone: prompt words of the abandoned requests."
    )
    gone_stall_s: float = Field(
        default=8.0,
        gt=0,
        description="client-gone: longest the decode engine is held stopped; keep it below "
        "decode.unresponsive_after_seconds (or the stall is treated as a hang).",
    )
    json_path: pathlib.Path | None = Field(default=None, description="Write the JSON report.")
    report_dir: pathlib.Path | None = Field(default=None, description=REPORT_DIR_DESCRIPTION)
