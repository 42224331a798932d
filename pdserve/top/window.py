"""The last `window_s` seconds of scrapes and the counter deltas over them (pure).

Contract: scrapes are added in time order. The window keeps every scrape no older than
`window_s` before the newest one, and always the two newest: rates span at most `window_s`
(less while it fills), or the gap between the last two scrapes when that is longer.
`delta()` is newest minus oldest per sample, like PromQL `increase` without extrapolation:
a sample that went down (router restart) counts its new value from zero, and a sample
missing from the oldest scrape (a label set first seen inside the window) counts from 0.
Only counters and histogram `_bucket`/`_sum`/`_count` samples have meaningful deltas; read
gauges from `newest`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from pdserve.top.scrape import SampleKey, Scrape


@dataclass(frozen=True)
class Delta:
    """Per-sample increase over `span_s` seconds (from the oldest to the newest scrape)."""

    samples: Mapping[SampleKey, float]
    span_s: float

    def rate(self, increase: float) -> float:
        """`increase` per second over the span (0.0 for an empty span)."""
        return increase / self.span_s if self.span_s > 0 else 0.0


def increase(old: float | None, new: float) -> float:
    """Counter increase from `old` to `new`, treating a decrease as a reset to zero."""
    if old is None or new < old:
        return new
    return new - old


def delta(oldest: Scrape, newest: Scrape) -> Delta:
    """Increase of every sample of `newest` since `oldest` (see the module contract)."""
    samples = {
        key: increase(oldest.samples.get(key), value) for key, value in newest.samples.items()
    }
    return Delta(samples=samples, span_s=max(0.0, newest.t_s - oldest.t_s))


class ScrapeWindow:
    """A sliding window of scrapes; not thread-safe."""

    def __init__(self, window_s: float) -> None:
        if window_s <= 0:
            raise ValueError(f"window must be > 0 s, got {window_s}")
        self.window_s = window_s
        self._scrapes: deque[Scrape] = deque()

    def add(self, scrape: Scrape) -> None:
        """Append `scrape` (not older than the newest) and drop those out of the window."""
        if self._scrapes and scrape.t_s < self._scrapes[-1].t_s:
            raise ValueError("scrapes must be added in time order")
        self._scrapes.append(scrape)
        cutoff = scrape.t_s - self.window_s - 1e-9
        while len(self._scrapes) > 2 and self._scrapes[0].t_s < cutoff:
            self._scrapes.popleft()

    def __len__(self) -> int:
        return len(self._scrapes)

    @property
    def newest(self) -> Scrape | None:
        return self._scrapes[-1] if self._scrapes else None

    @property
    def oldest(self) -> Scrape | None:
        return self._scrapes[0] if self._scrapes else None

    def delta(self) -> Delta | None:
        """Deltas from the oldest to the newest scrape; None until there are two scrapes."""
        if len(self._scrapes) < 2:
            return None
        return delta(self._scrapes[0], self._scrapes[-1])
