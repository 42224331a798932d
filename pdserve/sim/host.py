"""The shared CPU host's effects on one simulated run (pure, seeded): the profile's `cpu_host`
terms turned into times (pdserve/sim/cpu_host.py). With the neutral block (a profile without
`cpu_host`) every method returns its input unchanged and draws nothing, so the run is exact.

Who calls it: `Simulation` (simulator.py), once per hop, KV transfer, engine step, request and
host stall. Randomness: three streams seeded from the run's seed (the serving layer's spreads,
the host's speed per 50 ms window, the stalls), so adding stalls does not move the spreads.
"""

from __future__ import annotations

import math
import random
from statistics import NormalDist

from pdserve.sim.cpu_host import CpuHost
from pdserve.sim.engine import Step

STEP_SPEED_PERIOD_S = 0.05
"""How long the host's speed factor (`CpuHost.step_speed_sigma`) holds before the next draw:
about one short stream's decode, the scale at which other processes hold a core."""


class WindowSpeed:
    """One log-normal factor (median 1, `sigma`) per STEP_SPEED_PERIOD_S window of the clock,
    drawn from `rng` when a window is first asked for; always 1 with sigma 0."""

    def __init__(self, sigma: float, rng: random.Random):
        self._sigma = sigma
        self._rng = rng
        self._window = -1
        self._factor = 1.0

    def factor(self, now_s: float) -> float:
        """The host's speed factor for a step starting at `now_s` (times ask in order)."""
        if self._sigma <= 0:
            return 1.0
        window = math.floor(now_s / STEP_SPEED_PERIOD_S)
        if window != self._window:
            self._window = window
            self._factor = math.exp(self._rng.gauss(0.0, self._sigma))
        return self._factor


def run_speed_factors(sigma: float, runs: int) -> list[float]:
    """The host speed of each of `runs` pooled simulated runs: a log-normal of median 1 and
    `sigma` at evenly spaced quantiles ((i + 0.5) / runs), so the pool spans the spread
    without drawing it and the same profile always predicts the same. One run, or sigma 0:
    [1.0] * runs."""
    if sigma < 0 or runs < 1:
        raise ValueError(f"need sigma >= 0 and runs >= 1, got {sigma}, {runs}")
    normal = NormalDist()
    return [math.exp(sigma * normal.inv_cdf((i + 0.5) / runs)) for i in range(runs)]


class HostEffects:
    """One run's host: its terms, its speed over the whole run (`speed_factor`, 2 = twice as
    slow, on every engine step and serving-layer time) and its random streams."""

    def __init__(self, terms: CpuHost, *, seed: int, speed_factor: float = 1.0):
        if speed_factor <= 0:
            raise ValueError(f"speed_factor must be > 0, got {speed_factor}")
        self.terms = terms
        self.speed_factor = speed_factor
        self._rng = random.Random(seed)
        self._stall_rng = random.Random(f"host-stalls-{seed}")
        self._window = WindowSpeed(terms.step_speed_sigma, random.Random(f"step-speed-{seed}"))

    def spread(self, seconds: float, sigma: float) -> float:
        """`seconds` at this run's speed, times a log-normal factor of median 1 and `sigma`
        (0: exact)."""
        seconds *= self.speed_factor
        return seconds * math.exp(self._rng.gauss(0.0, sigma)) if sigma > 0 else seconds

    def remote_path_s(self, base_s: float, busy_cores: int) -> float:
        """A remote-prefill path's hop (or the handoff's two) while `busy_cores` host cores
        run engines: stretched by the contention, then spread."""
        return self.spread(
            self.terms.serving_s(base_s, busy_cores), self.terms.serving_jitter_sigma
        )

    def kv_transfer_s(self, base_s: float) -> float:
        """A KV transfer: spread like the remote path, not stretched (measured: its median
        stays near the idle one once the wait for the prefill engine's step is out)."""
        return self.spread(base_s, self.terms.serving_jitter_sigma)

    def decode_hop_s(self, hop_s: float, *, local: bool) -> float:
        """A decode-path hop (dispatch, or one stream chunk back); `local`: a local prefill's
        hop up to its first token, with its own spread."""
        t = self.terms
        return self.spread(hop_s, t.local_sigma() if local else t.decode_jitter_sigma)

    def client_s(self, num_prompt_tokens: int) -> float:
        """One request's time outside the router's timeline (drawn once per request)."""
        t = self.terms
        return self.spread(t.client_time_s(num_prompt_tokens), t.client_jitter_sigma)

    def intake_s(self, num_prompt_tokens: int) -> float:
        """The serving layer's work of taking one prompt in, spread per prompt as the client's
        time is (the intake is the per-token part of the router's and the client's times)
        and scaled to keep its mean."""
        sigma = self.terms.client_jitter_sigma
        return self.spread(self.terms.intake_s(num_prompt_tokens), sigma) * math.exp(
            -(sigma**2) / 2
        )

    def local_intake_s(self, num_prompt_tokens: int) -> float:
        """A decode replica's intake of a prompt it prefills itself (before any wait)."""
        return self.terms.local_intake_per_token_s * num_prompt_tokens * self.speed_factor

    def router_s(self, seconds: float) -> float:
        """The router's time at this run's speed."""
        return seconds * self.speed_factor

    def step_s(self, step: Step, now_s: float) -> float:
        """An engine step started at `now_s`: the cost model's time with its prompt tokens
        slowed by `prefill_step_factor`, plus `engine_step_extra_s`, at the host's speed of
        the step's 50 ms window and of the run."""
        t = self.terms
        seconds = step.duration_s + step.prompt_tokens_s * (t.prefill_step_factor - 1)
        seconds += t.engine_step_extra_s
        return seconds * self._window.factor(now_s) * self.speed_factor

    def next_stall_gap_s(self) -> float | None:
        """Seconds to the next host-wide stall (None: the host has no stalls)."""
        if not self.terms.has_stalls():
            return None
        return self._stall_rng.expovariate(self.terms.host_stall_rate_per_s)

    def stall_length_s(self) -> float:
        """The length of a stall that starts now (log-normal)."""
        t = self.terms
        return t.host_stall_median_s * math.exp(self._stall_rng.gauss(0.0, t.host_stall_sigma))
