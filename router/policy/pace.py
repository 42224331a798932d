"""Measured ÷ predicted prefill seconds, learned from the prefills that just ran (pure).

The cost model predicts a prefill on an engine doing nothing else (`pdserve profile` fits it
that way). Under load a prompt takes longer: it shares engine steps with other prompts, or its
engine shares the host. The routing pipeline compares a local prefill on decode against a
remote one (spill-over and the ITL guard's TTFT saved) with predictions, so an optimistic
remote prediction keeps a prompt queued for a busy prefill pool. `PrefillPace` keeps, per
pool, the moving mean of measured ÷ predicted seconds of that pool's recent prefills
(`CostScale`), and the pipeline scales each side's compute (queued work + this prompt) by it.
"""

from __future__ import annotations

import math

from pdserve.names import PoolName

__all__ = ["CostScale", "PrefillPace"]

_MAX_LOG_RATIO = math.log(20.0)


class CostScale:
    """Measured ÷ predicted cost of recent work: an exponentially weighted mean of log ratios,
    so a cost model that is off by a constant factor on this hardware (not yet calibrated
    with `pdserve profile`, or slower under load than when it was) is corrected. Starts at 1;
    each ratio is clamped to [1/20, 20]. `weight`: each observation's weight in (0, 1]."""

    def __init__(self, weight: float = 0.1):
        if not 0 < weight <= 1:
            raise ValueError(f"weight must be in (0, 1], got {weight}")
        self._weight = weight
        self._log_ratio = 0.0
        self.observations = 0
        """How many ratios it has taken in."""

    @property
    def ratio(self) -> float:
        return math.exp(self._log_ratio)

    def observe(self, predicted: float, measured: float) -> None:
        """Take in one measured cost against its prediction (ignored unless both are > 0)."""
        if predicted <= 0 or measured <= 0:
            return
        sample = min(_MAX_LOG_RATIO, max(-_MAX_LOG_RATIO, math.log(measured / predicted)))
        self._log_ratio += self._weight * (sample - self._log_ratio)
        self.observations += 1


class PrefillPace:
    """Per pool, measured ÷ predicted prefill seconds of recent prefills: the prefill pool's
    from remote prefills, decode's from prompts prefilled on a decode replica. `weight` 0
    turns it off (every ratio stays 1)."""

    def __init__(self, weight: float):
        if not 0 <= weight <= 1:
            raise ValueError(f"weight must be in [0, 1], got {weight}")
        self.enabled = weight > 0
        self._scales = {"prefill": CostScale(weight or 1.0), "decode": CostScale(weight or 1.0)}

    def observe(self, pool: PoolName, predicted_s: float, measured_s: float) -> None:
        """A prefill on `pool` was predicted to take `predicted_s` and took `measured_s` (the
        engine's scheduled → first token)."""
        if self.enabled:
            self._scales[pool].observe(predicted_s, measured_s)

    def ratio(self, pool: PoolName) -> float:
        """The pool's measured ÷ predicted (1.0 when off or before any prefill)."""
        return self._scales[pool].ratio if self.enabled else 1.0
