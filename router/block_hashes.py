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


def chained(parent: int, token_ids: Sequence[int], block_size: int) -> list[int]:
    """The hashes of the full blocks of `token_ids`, chained from `parent` (the hash of the
    block before them; ROOT_HASH for a prompt's first block). `chain_hash` per block, inlined:
    the KV-event translator calls this for every block an engine stores."""
    out = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start : start + block_size])))
        out.append(parent)
    return out


def block_hashes(token_ids: Sequence[int], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the prompt's full blocks, first block first."""
    return tuple(chained(ROOT_HASH, token_ids, block_size))
