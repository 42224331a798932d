"""An engine's own prefill queue: what it reports to every router."""

from __future__ import annotations

from pdserve.engine.pending import PendingPrefills, PendingSnapshot


def test_counts_uncached_tokens_until_done_and_done_is_idempotent() -> None:
    q = PendingPrefills()
    q.add("a", 1500)
    q.add("b", 40)
    assert q.snapshot() == PendingSnapshot(num_requests=2, num_tokens=1540)
    q.done("a")
    q.done("a")  # the first token and the stream's end both say done
    assert q.snapshot() == PendingSnapshot(num_requests=1, num_tokens=40)
    q.done("never-added")
    q.done("b")
    assert q.snapshot() == PendingSnapshot(num_requests=0, num_tokens=0)


def test_a_repeated_id_replaces_and_cached_beyond_the_prompt_counts_zero() -> None:
    q = PendingPrefills()
    q.add("a", 100)
    q.add("a", 300)  # a retry under the same id
    q.add("c", -20)  # the router expected more cached tokens than the prompt has
    assert q.snapshot() == PendingSnapshot(num_requests=2, num_tokens=300)
