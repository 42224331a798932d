"""The optional `cpu_host` block of a simulator profile (pure data): how a CPU machine whose
cores the engines share with the router and Ray Serve slows and spreads the work under load.

None of it describes a GPU deployment, whose engines have devices of their own; a profile
without the block simulates the engines and the serving layer exactly. Every field is fitted
on one measured run of this host by `pdserve simulate --fit-host-on` / `pdserve tune --fit-on`
(pdserve/sim/fit.py, fit_engine.py); the defaults are neutral (no slow-down, no spread, no
stalls), so `CpuHost()` changes nothing.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from pdserve.router.policy.strict import StrictModel


class CpuHost(StrictModel):
    """A shared CPU host under load (see the module docstring)."""

    host_cores: int = Field(
        default=1, ge=1, description="The cores the engines share with the serving layer."
    )
    host_contention: float = Field(
        default=0.0,
        ge=0,
        description=(
            "The remote-prefill path's Ray Serve hops grow by this factor x the fraction of "
            "host cores whose engine is in a step or has requests waiting at that moment."
        ),
    )
    engine_step_extra_s: float = Field(
        default=0.0,
        ge=0,
        description=(
            "Seconds every engine step takes on top of the cost model's time under load "
            "(output processing and the serving layer share the engines' cores)."
        ),
    )
    prefill_step_factor: float = Field(
        default=1.0,
        gt=0,
        le=4,
        description=(
            "How many times their idle time the prompt tokens an engine step computes take "
            "under load (a factor on their per-token and attention terms only)."
        ),
    )
    local_prefill_load_factor: float = Field(
        default=1.0,
        gt=0,
        le=8,
        description=(
            "How many times its idle fixed cost a prompt an engine prefills for its own "
            "decoding takes under load (a decode engine's local prefill, every prompt of an "
            "aggregated engine)."
        ),
    )
    local_hop_load_factor: float = Field(
        default=1.0,
        gt=0,
        le=8,
        description="How many times its idle length a local request's hop takes under load.",
    )
    local_intake_per_token_s: float = Field(
        default=0.0,
        ge=0,
        le=0.001,
        description=(
            "Per prompt token, a decode replica's work of taking in a prompt it prefills "
            "itself, one prompt at a time per replica."
        ),
    )
    step_speed_sigma: float = Field(
        default=0.0,
        ge=0,
        le=2,
        description=(
            "Every engine step runs at the host's speed of its 50 ms window of the clock: a "
            "log-normal factor of median 1 and this sigma, shared by all engines."
        ),
    )
    round_speed_sigma: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description=(
            "How far the host's speed moves between a run's rounds: each pooled simulated "
            "run takes one log-normal speed factor (evenly spaced quantiles, this sigma)."
        ),
    )
    serving_jitter_sigma: float = Field(
        default=0.0,
        ge=0,
        le=3,
        description="Log-normal spread of the remote-prefill path's hops and the KV transfer.",
    )
    decode_jitter_sigma: float = Field(
        default=0.0,
        ge=0,
        le=3,
        description="Log-normal spread of the decode path's hops (dispatch, each stream chunk).",
    )
    local_jitter_sigma: float | None = Field(
        default=None,
        ge=0,
        le=3,
        description=(
            "Spread of a local prefill's hops up to its first token (None = decode_jitter_sigma)."
        ),
    )
    router_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "The router's time under load, intercept of its line in prompt tokens (replaces "
            "the profile's idle line; None = keep the idle line)."
        ),
    )
    router_per_token_s: float = Field(
        default=0.0,
        ge=0,
        description="With router_s: the loaded router line's time per prompt token.",
    )
    client_s: float = Field(
        default=0.0,
        ge=0,
        description=(
            "Time outside the router's timeline before a client sees its first token (HTTP "
            "into and out of the router, the client's own work): intercept in prompt tokens."
        ),
    )
    client_per_token_s: float = Field(
        default=0.0, ge=0, description="Time outside the router's timeline per prompt token."
    )
    client_jitter_sigma: float = Field(
        default=0.0,
        ge=0,
        le=3,
        description="Log-normal spread of each request's time outside the router's timeline.",
    )
    host_stall_rate_per_s: float = Field(
        default=0.0,
        ge=0,
        description=(
            "Host-wide stalls per second (a Poisson process): every process of the deployment "
            "stops at once and the work in progress resumes a stall later."
        ),
    )
    host_stall_median_s: float = Field(
        default=0.0, ge=0, description="Median length of one host-wide stall."
    )
    host_stall_sigma: float = Field(
        default=1.0, ge=0, le=3, description="Log-normal spread of the stall lengths."
    )

    @model_validator(mode="after")
    def _router_line(self) -> CpuHost:
        if self.router_s is None and self.router_per_token_s > 0:
            raise ValueError("router_per_token_s needs router_s: the loaded router line")
        return self

    def serving_s(self, base_s: float, busy_cores: int) -> float:
        """A remote-prefill path's serving-layer time while `busy_cores` host cores run
        engine steps."""
        busy = min(1.0, busy_cores / self.host_cores)
        return base_s * (1 + self.host_contention * busy)

    def client_time_s(self, num_prompt_tokens: int) -> float:
        """The time outside the router's timeline of a prompt of `num_prompt_tokens` tokens."""
        return self.client_s + self.client_per_token_s * num_prompt_tokens

    def intake_s(self, num_prompt_tokens: int) -> float:
        """The serving layer's per-token work of taking a prompt in (the per-token terms of
        the loaded router line and of the client's time), on average: the stretch in which
        it holds up the first chunks of the other requests in flight (sim/intake.py)."""
        return (self.router_per_token_s + self.client_per_token_s) * num_prompt_tokens

    def local_sigma(self) -> float:
        """The spread of a local prefill's hops up to its first token."""
        return (
            self.decode_jitter_sigma if self.local_jitter_sigma is None else self.local_jitter_sigma
        )

    def has_stalls(self) -> bool:
        return self.host_stall_rate_per_s > 0 and self.host_stall_median_s > 0
