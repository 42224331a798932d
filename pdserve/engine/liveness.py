"""Whether an engine process still answers: the replica pings it, this judges the silence.

A vLLM engine can die (its process is gone: vLLM's own `check_health` fails) or hang (a
SIGSTOPped or wedged engine-core process: vLLM still reports it healthy). The replica sends
the engine core a trivial utility call about once a second (`EngineServer`'s watchdog) and
reports each answer here; an engine that has not answered for `unresponsive_after_s` is
unresponsive.

Stop routing first, then replace: an unresponsive engine is first *announced* (the replica's
routing stats say `healthy: false`, so every router moves the requests waiting on it), and
only `replace_after_announce_s` later does the health check kill it; a request stuck on it is
then already recovered as "unhealthy" instead of failing when its engine is killed. With no
router polling the stats, the health check replaces it `replace_unannounced_after_s` past the
bound. Pure and clock-injected: the watchdog owns the I/O.
"""

from __future__ import annotations

from collections.abc import Callable


class EngineLiveness:
    """The time since the engine last answered a ping, against a bound."""

    def __init__(
        self,
        unresponsive_after_s: float,
        clock: Callable[[], float],
        replace_after_announce_s: float = 3.0,
        replace_unannounced_after_s: float = 15.0,
    ):
        self._bound_s = unresponsive_after_s
        self._clock = clock
        self._replace_after_announce_s = replace_after_announce_s
        self._replace_unannounced_after_s = replace_unannounced_after_s
        self._last_answer_s = clock()  # a started engine has just answered (it is ready)
        self._announced_s: float | None = None

    def answered(self) -> None:
        """The engine answered a ping just now."""
        self._last_answer_s = self._clock()
        self._announced_s = None

    def announced(self) -> None:
        """The routers were just told this engine is unhealthy (first call counts)."""
        if self._announced_s is None:
            self._announced_s = self._clock()

    def silent_for_s(self) -> float:
        """Seconds since the engine last answered."""
        return max(0.0, self._clock() - self._last_answer_s)

    @property
    def unresponsive(self) -> bool:
        """The engine has not answered for longer than the bound."""
        return self.silent_for_s() > self._bound_s

    @property
    def replace(self) -> bool:
        """Unresponsive, and the routers have had time to stop using it (announced at least
        replace_after_announce_s ago), or nobody asked (replace_unannounced_after_s past the
        bound)."""
        if not self.unresponsive:
            return False
        now = self._clock()
        if self._announced_s is not None:
            return now - self._announced_s >= self._replace_after_announce_s
        return self.silent_for_s() > self._bound_s + self._replace_unannounced_after_s

    def describe(self) -> str:
        """Why the engine counts as unresponsive (for the health-check error)."""
        return (
            f"the engine process has not answered for {self.silent_for_s():.1f} s "
            f"(unresponsive_after_seconds={self._bound_s:g}): frozen or wedged"
        )
