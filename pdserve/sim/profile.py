"""What the simulator knows about a deployment's hardware (pure data): the engines' step-time
model and the serving layer's idle latencies, plus, optionally, how a shared CPU host slows
them under load.

Written by `pdserve profile --sim-profile PATH` (the engines and the idle serving layer, measured
on a running cluster) and extended by a fit on a measured run (`pdserve simulate --measured RUN
--fit-host-on NAME`, `pdserve tune --fit-on RUN`), which adds the `cpu_host` block. Read by
`pdserve simulate`, `pdserve tune` and `pdserve sim-check`. Every time is seconds (or seconds
per token).

A GPU deployment's profile has no `cpu_host` block: its engines do not share cores with the
router and Ray Serve. Without the block the simulation is exact and deterministic (no spread,
no stalls): what the engines and the serving layer's idle times give.
"""

from __future__ import annotations

import pathlib

from pydantic import Field

from pdserve.router.policy.cost_model import CostModel
from pdserve.router.policy.strict import StrictModel
from pdserve.sim.cpu_host import CpuHost

SIM_PROFILE_VERSION = 2
"""2: the shared-CPU-host terms moved into the optional `cpu_host` block (1 had them at the
top level)."""


class SimProfile(StrictModel):
    """The engines' step times and the serving layer around them.

    `cost_model` gives an engine step's time: the prefill chunks it computes (per token and
    attention terms; `fixed_overhead_s` once per prompt) and, when it decodes, the decode
    step (base + per sequence + per context token). The other top-level fields are the
    serving layer's idle latencies, measured from the router's per-request timeline.
    """

    version: int = Field(default=SIM_PROFILE_VERSION, description="Format version.")
    cost_model: CostModel = Field(
        default_factory=CostModel, description="Engine step times (see CostModel)."
    )
    router_s: float = Field(
        default=0.002,
        ge=0,
        description=(
            "Router time before a request is dispatched (parse, tokenize, place): the "
            "intercept of its line in prompt tokens."
        ),
    )
    router_per_token_s: float = Field(
        default=0.0,
        ge=0,
        description="Router time per prompt token on top of router_s (tokenizing, hashing).",
    )
    hop_s: float = Field(
        default=0.003,
        ge=0,
        description="One router -> replica call or reply (Ray Serve hop), each way.",
    )
    kv_transfer_fixed_s: float = Field(
        default=0.01,
        ge=0,
        description=(
            "KV transfer time a prompt pays whatever its length (NIXL handshake and the pull's "
            "polling floor); the per-token term is cost_model.kv_transfer_per_token_s."
        ),
    )
    local_prefill_fixed_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Fixed cost of a prompt an engine prefills for its own decoding (a decode engine's "
            "local prefill, every prompt of an aggregated engine), in place of "
            "cost_model.fixed_overhead_s, which is fitted on the prefill pool's prompts: a "
            "prefill-only request also pays the KV connector's work. Measured by `pdserve "
            "profile` on the decode engine's first step of short fresh prompts (None = "
            "fixed_overhead_s)."
        ),
    )
    local_hop_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "One hop of a request prefilled on its decode engine (every request when "
            "aggregated), each way: to the decode replica, and its first chunk back. Measured "
            "by `pdserve profile` as half the decode_hops of its local prefills on the idle "
            "cluster. None = hop_s."
        ),
    )
    cpu_host: CpuHost | None = Field(
        default=None,
        description=(
            "How a shared CPU host slows the engines and the serving layer under load (fitted "
            "on a measured run). None: the engines and the serving layer do not share cores "
            "(GPU nodes), and the simulation is exact."
        ),
    )
    source: str = Field(default="defaults", description="Where the numbers came from.")

    @property
    def host(self) -> CpuHost:
        """The host terms the simulation applies: the `cpu_host` block, or the neutral one
        (no slow-down, no spread, no stalls) when the profile has none."""
        return self.cpu_host if self.cpu_host is not None else CpuHost()

    def with_host(self, host: CpuHost, source: str | None = None) -> SimProfile:
        """This profile with `host` as its `cpu_host` block (and `source`, if given)."""
        update: dict[str, object] = {"cpu_host": host}
        if source is not None:
            update["source"] = source
        return self.model_copy(update=update)

    def with_host_terms(self, **terms: object) -> SimProfile:
        """This profile with these `cpu_host` terms set (the block created from the neutral
        one when the profile has none)."""
        return self.model_copy(update={"cpu_host": self.host.model_copy(update=terms)})

    def own_prompt_fixed_s(self) -> float:
        """The idle fixed cost of a prompt prefilled on the engine that decodes it."""
        if self.local_prefill_fixed_s is None:
            return self.cost_model.fixed_overhead_s
        return self.local_prefill_fixed_s

    def loaded_prompt_fixed_s(self) -> float:
        """`own_prompt_fixed_s` under load: what the simulated engines charge a prompt
        prefilled on the engine that decodes it (the host's `local_prefill_load_factor`)."""
        return self.own_prompt_fixed_s() * self.host.local_prefill_load_factor

    def idle_local_hop_s(self) -> float:
        """One hop of a local request on the idle cluster (`local_hop_s`, else `hop_s`)."""
        return self.hop_s if self.local_hop_s is None else self.local_hop_s

    def loaded_local_hop_s(self) -> float:
        """One hop of a local request up to its first token under load (the idle local hop
        times the host's `local_hop_load_factor`)."""
        return self.idle_local_hop_s() * self.host.local_hop_load_factor

    def router_time_s(self, num_prompt_tokens: int) -> float:
        """The router's time before dispatching a prompt of `num_prompt_tokens` tokens: the
        host's line under load when the profile has one, else the idle line."""
        h = self.cpu_host
        if h is not None and h.router_s is not None:
            return h.router_s + h.router_per_token_s * num_prompt_tokens
        return self.router_s + self.router_per_token_s * num_prompt_tokens

    def kv_transfer_s(self, num_tokens: int) -> float:
        """Seconds to move `num_tokens` tokens' KV from a prefill to a decode engine."""
        return self.kv_transfer_fixed_s + self.cost_model.est_transfer_s(num_tokens)

    @classmethod
    def load(cls, path: pathlib.Path) -> SimProfile:
        """Read a profile JSON file (ValueError naming the file when it is not one, or is of
        an older format)."""
        try:
            text = path.read_text()
        except OSError as exc:
            raise ValueError(f"{path}: cannot read the simulator profile ({exc})") from exc
        try:
            return cls.model_validate_json(text)
        except ValueError as exc:
            hint = ""
            if '"version": 1' in text or '"host_contention"' in text:
                hint = (
                    " (a version-1 profile: measure a new one with `pdserve profile "
                    "--sim-profile`, then fit the host on a run with `--fit-host-on`)"
                )
            raise ValueError(f"{path}: not a pdserve simulator profile{hint}: {exc}") from exc
