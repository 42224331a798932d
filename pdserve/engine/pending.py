"""The prefill work an engine has accepted and not finished: what the router's predicted time
to first token waits for on this replica.

Each replica counts its own (pure, owned by `EngineServer`): a prompt counts from the moment
the pool's request code hands it to vLLM until its first output (prefill done) or its end
(aborted, failed). The engine reports the totals in its routing stats, so every router sees
the same queue, not just the work it sent itself. Counts are prompt tokens minus the cached
tokens the router expected (`expected_cached_tokens`); a KV pull (decode with a handoff)
computes nothing and is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PendingSnapshot:
    num_requests: int
    num_tokens: int


class PendingPrefills:
    """Accepted, not yet prefilled prompts by request id. Not thread-safe: the replica's event
    loop adds, finishes and reads."""

    def __init__(self) -> None:
        self._tokens: dict[str, int] = {}
        self._total = 0

    def add(self, request_id: str, num_tokens: int) -> None:
        """Count a prompt of `num_tokens` uncached tokens (a repeated id replaces the old)."""
        self.done(request_id)
        tokens = max(0, num_tokens)
        self._tokens[request_id] = tokens
        self._total += tokens

    def done(self, request_id: str) -> None:
        """The prompt's prefill ended (first output, finish or abort); idempotent."""
        self._total -= self._tokens.pop(request_id, 0)

    def snapshot(self) -> PendingSnapshot:
        return PendingSnapshot(num_requests=len(self._tokens), num_tokens=self._total)
