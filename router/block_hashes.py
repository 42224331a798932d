"""The router's prefix block hashes: one chained hash per full KV block of a prompt (pure).

The router hashes prompts with its own chain (Python's tuple hash; stable within the router
process) and translates the engines' KV events into the same chain (router/kv_events.py), so it
never depends on how vLLM hashes blocks internally.
"""

from __future__ import annotations

from collections.abc import Sequence

ROOT_HASH = 0


def chain_hash(parent: int, tokens: Sequence[int]) -> int:
    """The hash of one block given its parent block's hash (ROOT_HASH for the first block)."""
    return hash((parent, tuple(tokens)))


def block_hashes(token_ids: Sequence[int], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the prompt's full blocks, first block first."""
    out = []
    parent = ROOT_HASH
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = chain_hash(parent, token_ids[start : start + block_size])
        out.append(parent)
    return tuple(out)
