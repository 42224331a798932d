"""Carry a serving-layer fit to another machine (pure).

A fit (`pdserve simulate --fit-host-on`) learns how the serving layer behaves under load on the
machine its run was measured on: how much the hops stretch while the engines hold the cores,
how they and the client spread, how the host's speed wanders (within a run and between its
rounds) and stalls, the router's and the client's times, the engines' extra step time under
load. An idle profile (`pdserve profile --sim-profile`) knows only the idle engines and hops of
its own machine. `carry_load` puts the first's load terms on the second's idle measurements:
the dimensionless terms (contention, spreads, stall rate) as they are, and the fitted times
scaled by how fast this machine's serving layer is against the fit's (the ratio of the two
profiles' idle hop times). Checked on the recorded runs of two machines (bench/RESULTS.md,
"Carrying a fit to another machine").
"""

from __future__ import annotations

from pdserve.sim.profile import SimProfile

DIMENSIONLESS_LOAD_TERMS = (
    "host_contention", "step_speed_sigma", "serving_jitter_sigma", "decode_jitter_sigma",
    "local_jitter_sigma", "client_jitter_sigma", "host_stall_rate_per_s",
    "host_stall_median_s", "host_stall_sigma", "prefill_step_factor",
    "local_prefill_load_factor", "local_hop_load_factor", "round_speed_sigma",
)  # fmt: skip
"""Taken as fitted. The stalls' length is a time, but the other tenants' and the OS's, not
this machine's serving layer, so it is not scaled."""
SCALED_LOAD_TERMS = (
    "router_s", "router_per_token_s", "client_s", "client_per_token_s", "engine_step_extra_s",
    "local_intake_per_token_s",
)  # fmt: skip
"""Times the serving layer spends (the router's, the client's and HTTP's, the engines' output
processing beside it, a replica's intake of a local prompt): scaled by the two machines' idle
hop times."""


def serving_speed_ratio(fitted: SimProfile, idle: SimProfile) -> float:
    """How long this machine's serving layer takes against the fit's: idle hop over fitted
    hop (0.5 = twice as fast). ValueError when either profile has no hop time."""
    if fitted.hop_s <= 0 or idle.hop_s <= 0:
        raise ValueError("both profiles need a measured hop time (hop_s > 0) to scale by")
    return idle.hop_s / fitted.hop_s


def has_load_terms(profile: SimProfile) -> bool:
    """Whether `profile` was fitted on a loaded run (anything but an idle profile's zeros)."""
    return (
        profile.host_contention > 0
        or profile.engine_step_extra_s > 0
        or profile.prefill_step_factor != 1.0
        or profile.local_prefill_load_factor != 1.0
        or profile.local_hop_load_factor != 1.0
        or profile.serving_jitter_sigma > 0
        or profile.decode_jitter_sigma > 0
        or profile.client_s > 0
    )


def carry_load(fitted: SimProfile, idle: SimProfile) -> SimProfile:
    """`idle`'s engines, hops and KV transfer with `fitted`'s load terms (module docstring).
    ValueError when `fitted` has no load terms (an idle profile: nothing to carry) or a
    profile has no hop time."""
    if not has_load_terms(fitted):
        raise ValueError(
            "the profile to carry from has no load terms (an idle profile?): fit one first "
            "with `pdserve simulate --measured RUN --fit-host-on NAME --write-profile PATH`"
        )
    ratio = serving_speed_ratio(fitted, idle)
    update: dict[str, object] = {k: getattr(fitted, k) for k in DIMENSIONLESS_LOAD_TERMS}
    update.update({k: getattr(fitted, k) * ratio for k in SCALED_LOAD_TERMS})
    update["host_cores"] = idle.host_cores if idle.host_cores is not None else fitted.host_cores
    update["source"] = (
        f"{idle.source}; load terms carried from [{fitted.source}], serving times x{ratio:.2f}"
    )
    return idle.model_copy(update=update)
