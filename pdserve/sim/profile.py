"""What the simulator knows about the hardware: the fitted cost model plus the serving
layer's fixed latencies (pure data).

Written by `pdserve profile --sim-profile PATH` from measurements of the running engines and
read by `pdserve tune` / the simulator. Every field is seconds (or seconds per token).
"""

from __future__ import annotations

import pathlib

from pydantic import Field

from pdserve.router.policy.cost_model import CostModel
from pdserve.router.policy.strict import StrictModel

SIM_PROFILE_VERSION = 1


class SimProfile(StrictModel):
    """Step-time model of one engine (prefill and decode) and the fixed serving latencies.

    `cost_model` gives an engine step's time: the prefill chunks it computes (per token and
    attention terms; `fixed_overhead_s` once per prompt) and, when it decodes, the decode
    step (base + per sequence + per context token). The other fields are what the serving
    layer adds around the engines, measured from the router's per-request timeline.
    """

    version: int = Field(default=SIM_PROFILE_VERSION, description="Format version.")
    cost_model: CostModel = Field(
        default_factory=CostModel, description="Engine step times (see CostModel)."
    )
    router_s: float = Field(
        default=0.002,
        ge=0,
        description=(
            "Router time before a request is dispatched (parse, tokenize, place); with "
            "router_per_token_s, the intercept of its line in prompt tokens."
        ),
    )
    router_per_token_s: float = Field(
        default=0.0,
        ge=0,
        description=(
            "Router time per prompt token on top of router_s: tokenizing and hashing a longer "
            "prompt, and long prompts that arrive together waiting on each other in the "
            "router (fitted with client_per_token_s from a measured run's request classes; "
            "0 = router_s for every prompt)."
        ),
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
            "profile` on the decode engine's first step of short fresh prompts, from those "
            "sent while a decode batch runs when there are any (None = fixed_overhead_s)."
        ),
    )
    local_hop_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "One hop of a request prefilled on its decode engine (every request when "
            "aggregated), each way: to the decode replica, and its first chunk back. Measured "
            "by `pdserve profile` as half the decode_hops of its local prefills on the idle "
            "cluster (the median); hop_s is measured on the remote-prefill path's four hops. "
            "None = hop_s."
        ),
    )
    host_cores: int | None = Field(
        default=None,
        ge=1,
        description=(
            "CPU machines: the cores the engines share with the serving layer (router, Ray "
            "Serve replicas); None = the serving layer has CPUs of its own (GPU nodes)."
        ),
    )
    host_contention: float = Field(
        default=0.0,
        ge=0,
        description=(
            "With host_cores: the remote-prefill path's Ray Serve hops grow by this factor "
            "x the fraction of host cores whose engine is in a step or has requests waiting "
            "at that moment (fitted from a measured run's timeline by `fit_host_contention`)."
        ),
    )
    engine_step_extra_s: float = Field(
        default=0.0,
        ge=0,
        description=(
            "Seconds every engine step takes on top of the cost model's time while the "
            "deployment serves load: on a CPU host, the engines' output processing and "
            "streaming and the serving layer share the cores the idle profile had to itself "
            "(fitted with step_speed_sigma and host_contention from a measured run's TPOT; "
            "0 = the cost model alone)."
        ),
    )
    prefill_step_factor: float = Field(
        default=1.0,
        gt=0,
        le=4,
        description=(
            "How much longer the prompt tokens an engine step computes take under load than "
            "the cost model's idle time: a factor on their per-token and attention terms, not "
            "on the step's fixed costs or the sequences it decodes beside them (the step "
            "extra comes on top). On a CPU host a prompt's matrix work shares the caches and "
            "memory bandwidth with the other engines and the serving layer, which the idle "
            "profile had to itself; a short prompt's step is mostly fixed cost, and on run T "
            "it measured about as fast under load as idle. "
            "Fitted so the simulated prefill stage's median is a measured run's (1 = the "
            "cost model alone)."
        ),
    )
    local_prefill_load_factor: float = Field(
        default=1.0,
        gt=0,
        le=8,
        description=(
            "How many times its idle fixed cost (`own_prompt_fixed_s`) a prompt an engine "
            "prefills for its own decoding takes under load: a decode engine's local prefill, "
            "every prompt of an aggregated engine. Admitting a request is the engine's and "
            "its replica's host work, which shares the cores under load; on runs X-AA the "
            "short requests' first step measured 3.7-4.7 ms against 2.4-3.6 simulated from "
            "the idle cost. Fitted so the simulated first step of a measured run's local "
            "request classes (decode_first_token p50) is the run's (1 = the idle cost)."
        ),
    )
    local_hop_load_factor: float = Field(
        default=1.0,
        gt=0,
        le=8,
        description=(
            "How many times its idle length a local request's hop (`local_hop_s`, or hop_s "
            "when that is not measured) takes under load, up to its first token. On runs "
            "AB-AD the short requests' decode_hops measured 4.3-5.3 ms p50 against 3.0-3.6 "
            "simulated from the idle hop. Fitted so the simulated decode_hops of a measured "
            "run's local request classes (p50) are the run's (1 = the idle hop)."
        ),
    )
    local_intake_per_token_s: float = Field(
        default=0.0,
        ge=0,
        le=0.001,
        description=(
            "Per prompt token, the decode replica's work of taking in a prompt it prefills "
            "itself before its engine queues it (a local prefill, every prompt of an "
            "aggregated engine): the hop to the replica takes this times the prompt's tokens "
            "on top, one prompt at a time per replica, so the second long prompt of a burst "
            "waits for the first's. On runs AD-AF the aggregated engines' long prompts (1,500 "
            "tokens) measured decode_hops p50 of 23-24 ms against 5 for the short ones. "
            "Fitted so the simulated decode_hops of the run's longest local class (p50) on a "
            "deployment whose local classes differ in length (aggregated) are the run's; 0 = "
            "none."
        ),
    )
    step_speed_sigma: float = Field(
        default=0.0,
        ge=0,
        le=2,
        description=(
            "How the host's speed wanders under load: every engine step takes a factor "
            "shared by all engines and drawn afresh every 50 ms of the clock "
            "(STEP_SPEED_PERIOD_S; log-normal, median 1, this sigma). On a shared CPU host "
            "other processes take the cores for tens of milliseconds at a time, so a whole "
            "short stream can decode fast or slow, and a prompt's prefill likewise. Fitted with "
            "engine_step_extra_s from a measured run's TPOT p50 and p90; 0 = steady."
        ),
    )
    round_speed_sigma: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description=(
            "How far the host's speed moves between a run's rounds, minutes apart (on a shared "
            "host, other tenants come and go): a prediction pools its simulated runs each at "
            "its own speed, every engine step and serving-layer time times one factor per "
            "run (log-normal, median 1, this sigma; the runs take evenly spaced quantiles), as "
            "a measured run pools rounds taken at different speeds. Fitted from the spread of "
            "a measured run's rounds (each deployment's TPOT p50 per round, "
            "bench.rounds.round_speed_sigma); 0 = one speed throughout."
        ),
    )
    serving_jitter_sigma: float = Field(
        default=0.0,
        ge=0,
        le=3,
        description=(
            "Spread of the remote-prefill path's hops and the KV transfer: each is its modelled "
            "value times a log-normal factor of median 1 and this sigma (0 = exact; fitted "
            "with host_contention from a measured run's prefill_hops p90 / p50)."
        ),
    )
    decode_jitter_sigma: float = Field(
        default=0.0,
        ge=0,
        le=3,
        description=(
            "Spread of the decode path's hops (router -> decode replica, each stream chunk -> "
            "router): a log-normal factor of median 1 and this sigma (0 = exact; fitted from a "
            "measured run's decode_hops p90 / p50, of its remotely prefilled classes when the "
            "run tells them apart)."
        ),
    )
    local_jitter_sigma: float | None = Field(
        default=None,
        ge=0,
        le=3,
        description=(
            "Spread of the hops before the first token of a request that prefills on its "
            "decode engine (every request when aggregated): to the decode replica and its "
            "first chunk back; it replaces decode_jitter_sigma there (None = "
            "decode_jitter_sigma; fitted from the decode_hops of a measured run's request "
            "classes that prefilled locally)."
        ),
    )
    client_s: float = Field(
        default=0.0,
        ge=0,
        description=(
            "Time outside the router's timeline before a client sees its first token: HTTP "
            "into and out of the router and the client's own work (fitted from a measured "
            "run's client_overhead p50, or, with client_per_token_s, the intercept of its line "
            "in prompt tokens; 0 = not modelled)."
        ),
    )
    client_per_token_s: float = Field(
        default=0.0,
        ge=0,
        description=(
            "Time outside the router's timeline per prompt token on top of client_s: a longer "
            "request body to send and read (fitted from a measured run's request classes; 0 = "
            "client_s for every prompt)."
        ),
    )
    client_jitter_sigma: float = Field(
        default=0.0,
        ge=0,
        le=3,
        description=(
            "Spread of the time outside the router's timeline (HTTP into and out of the "
            "router, the client's own work): a log-normal factor of median 1 and this sigma on "
            "each request's (0 = exact; fitted from a measured run's client_overhead p90 / p50, "
            "the mean over its request classes)."
        ),
    )
    host_stall_rate_per_s: float = Field(
        default=0.0,
        ge=0,
        description=(
            "Host-wide stalls per second: moments when every process of the deployment stops "
            "at once (on a shared machine, other tenants and the OS taking the cores) and "
            "all work in progress (engine steps, hops, KV transfers) resumes a stall later; "
            "a Poisson process (0 = none; fitted with host_stall_median_s from a measured "
            "run's ITL p90 and p99 and TPOT p50)."
        ),
    )
    host_stall_median_s: float = Field(
        default=0.0,
        ge=0,
        description=(
            "Median length of one host-wide stall; lengths are log-normal with host_stall_sigma."
        ),
    )
    host_stall_sigma: float = Field(
        default=1.0,
        ge=0,
        le=3,
        description="Spread of the stall lengths (log-normal sigma; not fitted).",
    )
    source: str = Field(default="defaults", description="Where the numbers came from.")

    def own_prompt_fixed_s(self) -> float:
        """The fixed cost of a prompt prefilled on the engine that decodes it."""
        if self.local_prefill_fixed_s is None:
            return self.cost_model.fixed_overhead_s
        return self.local_prefill_fixed_s

    def loaded_prompt_fixed_s(self) -> float:
        """`own_prompt_fixed_s` under load: the fixed cost the simulated engines charge a
        prompt prefilled on the engine that decodes it (`local_prefill_load_factor` times)."""
        return self.own_prompt_fixed_s() * self.local_prefill_load_factor

    def loaded_local_hop_s(self) -> float:
        """One hop of a local request up to its first token under load: `local_hop_s` (hop_s
        when not measured) times `local_hop_load_factor`."""
        hop_s = self.hop_s if self.local_hop_s is None else self.local_hop_s
        return hop_s * self.local_hop_load_factor

    def router_time_s(self, num_prompt_tokens: int) -> float:
        """The router's time before dispatching a prompt of `num_prompt_tokens` tokens."""
        return self.router_s + self.router_per_token_s * num_prompt_tokens

    def client_time_s(self, num_prompt_tokens: int) -> float:
        """The time outside the router's timeline of a prompt of `num_prompt_tokens` tokens."""
        return self.client_s + self.client_per_token_s * num_prompt_tokens

    def intake_s(self, num_prompt_tokens: int) -> float:
        """The serving layer's per-token work of taking in a prompt of `num_prompt_tokens`
        tokens (the per-token terms of the router's and the client's times), on average: the
        stretch in which it holds up the first chunks of the other requests in flight
        (sim/intake.py; the simulator spreads it per prompt with this mean)."""
        return (self.router_per_token_s + self.client_per_token_s) * num_prompt_tokens

    def serving_s(self, base_s: float, busy_cores: int) -> float:
        """A serving-layer time while `busy_cores` host cores run engine steps."""
        if self.host_cores is None:
            return base_s
        return base_s * (1 + self.host_contention * min(1.0, busy_cores / self.host_cores))

    def kv_transfer_s(self, num_tokens: int) -> float:
        """Seconds to move `num_tokens` tokens' KV from a prefill to a decode engine."""
        return self.kv_transfer_fixed_s + self.cost_model.est_transfer_s(num_tokens)

    @classmethod
    def load(cls, path: pathlib.Path) -> SimProfile:
        """Read a profile JSON file (ValueError naming the file when it is not one)."""
        try:
            return cls.model_validate_json(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a pdserve simulator profile ({exc})") from exc
