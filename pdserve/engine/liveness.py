"""Whether an engine process still answers: the replica pings it, this judges the silence.

A vLLM engine can die (its process is gone: vLLM's own `check_health` fails) or hang (a
SIGSTOPped or wedged engine-core process: vLLM still reports it healthy). The replica sends
the engine core a trivial utility call about once a second (`EngineServer`'s watchdog) and
reports each answer here; an engine that has not answered for `unresponsive_after_s` is
unresponsive. Pure and clock-injected: the watchdog owns the I/O.
"""

from __future__ import annotations

from collections.abc import Callable


class EngineLiveness:
    """The time since the engine last answered a ping, against a bound."""

    def __init__(self, unresponsive_after_s: float, clock: Callable[[], float]):
        self._bound_s = unresponsive_after_s
        self._clock = clock
        self._last_answer_s = clock()  # a started engine has just answered (it is ready)

    def answered(self) -> None:
        """The engine answered a ping just now."""
        self._last_answer_s = self._clock()

    def silent_for_s(self) -> float:
        """Seconds since the engine last answered."""
        return max(0.0, self._clock() - self._last_answer_s)

    @property
    def unresponsive(self) -> bool:
        """The engine has not answered for longer than the bound."""
        return self.silent_for_s() > self._bound_s

    def describe(self) -> str:
        """Why the engine counts as unresponsive (for the health-check error)."""
        return (
            f"the engine process has not answered for {self.silent_for_s():.1f} s "
            f"(unresponsive_after_seconds={self._bound_s:g}): frozen or wedged"
        )
