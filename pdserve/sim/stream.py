"""How a simulated stream's tokens go out in chunks: the decode replica's coalescing rule
(decode_pool/coalesce.py), on the simulation clock (pure)."""

from __future__ import annotations

from collections.abc import Sequence


def coalesce_times(token_times_s: Sequence[float], interval_s: float) -> list[float]:
    """When each stream chunk reaches the router, given when each token was produced: the
    first token and the last go at once; any other waits until `interval_s` has passed since
    the previous chunk and goes with the first token produced after that (decode_pool/
    coalesce.py's rule)."""
    sent: list[float] = []
    for i, t in enumerate(token_times_s):
        last = i == len(token_times_s) - 1
        if not sent or last or t - sent[-1] >= interval_s:
            sent.append(t)
    return sent
