"""`TenantsBenchConfig`: every option of `pdserve bench-tenants`, validated (pydantic v2, pure)."""

from __future__ import annotations

import pathlib

from pydantic import Field

from pdserve.router.policy.strict import StrictModel

DEFAULT_KEY_FILE = (
    pathlib.Path(__file__).resolve().parent.parent / "deploy" / "keys" / "tenants-bench.yaml"
)


class TenantsBenchConfig(StrictModel):
    """The run configuration; written as `config` into the JSON report."""

    url: str = Field(default="http://127.0.0.1:8000", description="Server base URL (no /v1).")
    model: str | None = Field(default=None, description="Model id; None: first of /v1/models.")
    key_file: pathlib.Path = Field(
        default=DEFAULT_KEY_FILE,
        description="The cluster's tenant key file (router.auth.api_key_file): the bench "
        "reads each tenant's key, weight and limits from it.",
    )
    flood_tenant: str = Field(default="batch", description="Tenant A: floods long prompts.")
    steady_tenant: str = Field(default="chat", description="Tenant B: steady interactive load.")
    heavy_tenant: str = Field(default="gold", description="The weight-3 tenant of the 3:1 phase.")
    light_tenant: str = Field(default="bronze", description="The weight-1 tenant of the 3:1 phase.")
    steady_rate_per_s: float = Field(
        default=2.0, gt=0, description="Tenant B's requests per second (a fixed-rate open loop)."
    )
    steady_tokens: int = Field(
        default=600,
        ge=512,
        description="Tenant B's prompt tokens (long enough to prefill remotely).",
    )
    flood_tokens: int = Field(
        default=3000, gt=0, description="Tenant A's (and the 3:1 phase's) prompt tokens."
    )
    flood_share_multiple: float = Field(
        default=10.0,
        gt=0,
        description="Tenant A sends this many times its fair share: its weight's share of the "
        "requests per second the cluster served of its prompts in the calibration.",
    )
    flood_max_attempts: int = Field(
        default=3,
        gt=0,
        description="Attempts per tenant-A request (a 429 is resent after its Retry-After, as "
        "the official SDK does twice by default); then it gives up (refused, not lost).",
    )
    calibrate_clients: int = Field(
        default=16, gt=0, description="Closed-loop clients of the calibration (A alone)."
    )
    calibrate_s: float = Field(default=10.0, gt=0, description="Seconds of the calibration.")
    output_tokens: int = Field(default=16, gt=0, description="max_tokens of every request.")
    phase_s: float = Field(
        default=45.0, gt=0, description="Seconds of each B phase (alone, sharing on, off)."
    )
    weights_s: float = Field(
        default=60.0, gt=0, description="Seconds of the 3:1 phase (both tenants saturating)."
    )
    weights_clients: int = Field(
        default=12, gt=0, description="Closed-loop clients of each tenant in the 3:1 phase."
    )
    weights_output_tokens: int = Field(
        default=2, gt=0, description="max_tokens in the 3:1 phase (prefill is what is shared)."
    )
    max_retry_wait_s: float = Field(
        default=5.0, gt=0, description="Longest Retry-After a client waits before resending."
    )
    request_timeout_s: float = Field(default=120.0, gt=0, description="Per attempt.")
    max_ttft_ratio: float = Field(
        default=1.5, gt=0, description="Check: B's TTFT p99 with A and sharing on ÷ alone."
    )
    max_degradation_share: float = Field(
        default=1 / 3,
        gt=0,
        description="Check: B's p99 increase with sharing on ÷ its increase with sharing off.",
    )
    weight_tolerance: float = Field(
        default=0.15, gt=0, description="Check: measured prefill seconds within ±this of 3:1."
    )
    json_path: pathlib.Path | None = Field(default=None, description="Write the report here.")
