"""What a checked KV handoff carries, and the checks a decode engine runs on it (pure).

A prefill engine that was asked to (`VERIFY_KEY` in the prefill request's kv_transfer_params)
adds a `HandoffIntegrity` record to the handoff it returns: who the KV belongs to (request id,
a SHA-256 of the prompt's token ids, token count, model), when its lease runs out (wall
clock), and one 64-bit digest per KV block per tensor-parallel rank (pdserve.kv_transfer.digest).
The decode engine checks the record against the request that carries it before it pulls
(`identity_failure`), and the blocks it pulled against the digests before decode is scheduled
(`bad_blocks`). Anything that fails is recomputed on the decode engine and counted with its
`FailureReason`.

Used by the connector (verified_connector.py and its scheduler/worker halves) inside the
engine processes; no I/O here. Wire format version 1 (`FORMAT_VERSION`), a plain dict inside
vLLM's kv_transfer_params so it survives vLLM's msgpack and Ray's pickling.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

FORMAT_VERSION = 1
VERIFY_KEY = "pdserve_verify"
"""kv_transfer_params key (bool): check this request's handoff (set by the router)."""
INTEGRITY_KEY = "pdserve_integrity"
"""kv_transfer_params key of the producer's `HandoffIntegrity` (a dict on the wire)."""
EXPECT_KEY = "pdserve_expect_request_id"
"""kv_transfer_params key on a decode request: the prefill request id the router sent."""

FailureReason = Literal["digest", "identity", "stale", "unverifiable"]
FAILURE_REASONS: tuple[FailureReason, ...] = ("digest", "identity", "stale", "unverifiable")
"""digest: a pulled block's bytes differ from the producer's; identity: the handoff belongs to
another prompt, request or model; stale: the lease had run out before the decode engine
received the request (its blocks may hold another prompt by now), or a digest mismatch after
it ran out; unverifiable: verification was asked for but the handoff has no usable record."""

STALE_MARGIN_S = 1.0
"""A request that reaches the decode engine within this long of its lease's end counts as
stale: covers clock skew between nodes and the producer's own step timing."""


def prompt_sha256(token_ids: Sequence[int]) -> str:
    """SHA-256 (hex) of a prompt's token ids as little-endian uint32s."""
    h = hashlib.sha256()
    h.update(b"".join(int(t).to_bytes(4, "little", signed=False) for t in token_ids))
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class HandoffIntegrity:
    """The producer's record of one handoff.

    `digests[rank][i]`: the digest of the i-th block of `remote_block_ids[0]` on
    tensor-parallel rank `rank` (empty: the producer could not digest it).
    """

    request_id: str
    prompt_sha256: str
    num_prompt_tokens: int
    model: str
    lease_expires_unix_s: float
    digests: tuple[tuple[int, ...], ...] = ()
    format_version: int = FORMAT_VERSION

    def to_wire(self) -> dict[str, Any]:
        return {
            "v": self.format_version,
            "request_id": self.request_id,
            "prompt_sha256": self.prompt_sha256,
            "num_prompt_tokens": self.num_prompt_tokens,
            "model": self.model,
            "lease_expires_unix_s": self.lease_expires_unix_s,
            "digests": [list(rank) for rank in self.digests],
        }

    @classmethod
    def from_wire(cls, raw: Any) -> HandoffIntegrity | None:
        """The record, or None when `raw` is missing, malformed or of another version."""
        if not isinstance(raw, dict) or raw.get("v") != FORMAT_VERSION:
            return None
        try:
            return cls(
                request_id=str(raw["request_id"]),
                prompt_sha256=str(raw["prompt_sha256"]),
                num_prompt_tokens=int(raw["num_prompt_tokens"]),
                model=str(raw["model"]),
                lease_expires_unix_s=float(raw["lease_expires_unix_s"]),
                digests=tuple(tuple(int(d) for d in rank) for rank in raw.get("digests") or ()),
            )
        except (KeyError, TypeError, ValueError):
            return None


def external_request_id(engine_request_id: str) -> str:
    """The id the caller gave vLLM: vLLM's engine-side id with its `-<8 hex>` suffix removed."""
    head, sep, tail = engine_request_id.rpartition("-")
    return head if sep and len(tail) == 8 else engine_request_id


def same_request(expected_request_id: str, remote_request_id: str) -> bool:
    """Whether the producer's request id is the one the router sent: vLLM makes its internal
    id unique by appending `-<8 hex>` to the caller's."""
    return expected_request_id in (remote_request_id, external_request_id(remote_request_id))


def identity_failure(
    record: HandoffIntegrity | None,
    *,
    expected_request_id: str | None,
    prompt_token_ids: Sequence[int],
    model: str,
    num_remote_blocks: int,
    tp_rank: int,
    now_unix_s: float,
    digests_comparable: bool = True,
) -> FailureReason | None:
    """Why a decode engine must not pull this handoff, or None when it may.

    Called once per verified request when the decode engine's scheduler receives it.
    `expected_request_id`: what the router sent to the prefill engine (None: not known, the
    request-id check is skipped; the prompt hash still binds the handoff to this prompt).
    `digests_comparable`: False when the pools' tensor-parallel sizes differ (a decode rank
    then holds other bytes than any one prefill rank): the digests are neither required nor
    checked, identity and lease still are.
    """
    if record is None:
        return "unverifiable"
    if (
        record.model != model
        or record.num_prompt_tokens != len(prompt_token_ids)
        or (
            expected_request_id is not None
            and not same_request(expected_request_id, record.request_id)
        )
        or record.prompt_sha256 != prompt_sha256(prompt_token_ids)
    ):
        return "identity"
    if digests_comparable and (
        tp_rank >= len(record.digests) or len(record.digests[tp_rank]) != num_remote_blocks
    ):
        return "unverifiable"
    if now_unix_s > record.lease_expires_unix_s - STALE_MARGIN_S:
        return "stale"
    return None


def bad_blocks(
    expected: Sequence[int], local_block_ids: Sequence[int], local_digests: Sequence[int]
) -> list[int]:
    """The local block ids whose digest differs from the producer's.

    `expected`: the producer's digests of every remote block; the decode engine pulled the
    last len(local_block_ids) of them (blocks it already held from its own prefix cache are
    not pulled). More local blocks than remote ones is a mismatch of every block.
    """
    if len(local_block_ids) != len(local_digests):
        raise ValueError("one digest per local block")
    if len(local_block_ids) > len(expected):
        return list(local_block_ids)
    tail = expected[len(expected) - len(local_block_ids) :]
    return [
        b for b, want, got in zip(local_block_ids, tail, local_digests, strict=True) if want != got
    ]
