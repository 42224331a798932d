"""Tenants (pure data): the tenant key file's format and the router's fair-share settings.

A tenant is a team, product or customer sharing the cluster. Its keys, weight, priority class
and limits come from the key file (`router.auth.api_key_file`, docs/tenants.md); how the
router shares a saturated tier between tenants comes from `router.tenants` (`TenantsConfig`).
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from pdserve.router.policy.strict import StrictModel

TENANT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
"""Tenant names: they become a metric label value, so short and plain."""
DEFAULT_TENANT = "default"
"""The tenant of every request on an open API and of the keys in `router.auth.api_key_env`;
a key-file tenant with this name sets its weight, priority and limits."""


class TenantLimits(StrictModel):
    """A tenant's limits, enforced by each router replica (docs/tenants.md says how several
    replicas split them). None = no limit. Counted as OpenAI counts them: a request's tokens
    are its prompt tokens plus its output tokens."""

    requests_per_minute: int | None = Field(
        default=None, gt=0, description="Requests accepted per minute (a token bucket)."
    )
    tokens_per_minute: int | None = Field(
        default=None,
        gt=0,
        description=(
            "Prompt + output tokens per minute (a token bucket). A request reserves its prompt "
            "tokens plus its max_tokens (or router.default_max_tokens) when it is admitted; when "
            "it ends, the output tokens it did not generate are given back."
        ),
    )
    max_concurrent_requests: int | None = Field(
        default=None,
        gt=0,
        description="Requests (a stream counts until it ends) the tenant may have in flight.",
    )
    max_prompt_tokens: int | None = Field(
        default=None,
        gt=0,
        description="Longest prompt accepted, in tokens (a longer one is answered 413).",
    )


class TenantSpec(StrictModel):
    """One tenant of the key file."""

    name: str = Field(
        pattern=TENANT_NAME_PATTERN,
        description="Shown in metrics, `pdserve top` and logs (never a key).",
    )
    weight: float = Field(
        default=1.0,
        gt=0,
        le=1000,
        description=(
            "Share of a saturated tier: tenants that want more than the tier has get its "
            "capacity in proportion to their weights."
        ),
    )
    priority: int = Field(
        default=0,
        ge=0,
        le=9,
        description=(
            "Priority class: while a tier queue holds requests of several classes, the lower "
            "class is served first (fair sharing by weight applies within a class)."
        ),
    )
    keys: list[str] = Field(
        default_factory=list, description="The tenant's API keys, in plain text."
    )
    key_sha256: list[str] = Field(
        default_factory=list,
        description=(
            "The tenant's API keys as lowercase hex SHA-256 digests, so the file need not "
            "hold the keys (`pdserve tenants hash-key` prints one)."
        ),
    )
    limits: TenantLimits = Field(default_factory=TenantLimits, description="Its limits.")

    @model_validator(mode="after")
    def _keys_wellformed(self) -> Self:
        for digest in self.key_sha256:
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError(
                    f"tenant {self.name}: key_sha256 entries must be 64 lowercase hex digits"
                )
        if any(not k.strip() or k != k.strip() for k in self.keys):
            raise ValueError(f"tenant {self.name}: a key is empty or has surrounding spaces")
        return self


class TenantFile(StrictModel):
    """The tenant key file: `tenants: [...]` (docs/tenants.md has an example)."""

    tenants: list[TenantSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Self:
        names = [t.name for t in self.tenants]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"tenant names must be unique; repeated: {', '.join(twice)}")
        return self


class TenantsConfig(StrictModel):
    """Fair sharing of each tier between tenants (docs/tenants.md). When a tier is full, new
    requests wait in a short queue in front of it, and the next one served is the one of the
    tenant furthest below its weighted share."""

    fair_share: bool = Field(
        default=True,
        description=(
            "Queue in front of saturated tiers and serve tenants by weight, when more than "
            "one tenant has keys (with one tenant there is nothing to share: no queues). Off: "
            "tiers take requests in arrival order up to the admission bounds (one busy tenant "
            "can hold them all)."
        ),
    )
    prefill_seconds_per_replica: float = Field(
        default=0.25,
        gt=0,
        description=(
            "How much prefill work this router lets run per replica that prefills (prefill "
            "pool; decode pool when aggregated) before requests queue, in engine seconds: each "
            "request counts its cost-model prediction for its uncached tokens, scaled by how "
            "the engines' measured prefill times compared with the predictions lately. Small "
            "keeps the engines' own queues short so the order is decided here; too small "
            "leaves an engine idle between prefills. A request bigger than the whole window "
            "still runs alone."
        ),
    )
    decode_streams_per_replica: int | None = Field(
        default=None,
        gt=0,
        description=(
            "Decode streams this router lets run per decode replica before requests queue. "
            "None = router.admission.max_decode_streams (no decode queue when that is None)."
        ),
    )
    max_queue_seconds: float = Field(
        default=10.0,
        gt=0,
        description=(
            "Longest a request waits in a tier queue; then it is refused with 429 "
            "(reason fair_queue_timeout)."
        ),
    )
    max_queued_per_tenant: int = Field(
        default=64,
        gt=0,
        description=(
            "Requests one tenant may have waiting in a tier queue; one more is refused with "
            "429 at once (reason fair_queue_full)."
        ),
    )
