"""The typed handoff between a prefill and a decode engine.

vLLM's NixlConnector describes a finished remote-decode prefill as a plain dict
(`RequestOutput.kv_transfer_params`). This module wraps it once, at the edge, in `KVHandoff`
so the rest of pdserve never touches string keys. Wire format version 1; unknown keys that a
newer vLLM adds are carried through untouched in `passthrough`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

HANDOFF_FORMAT_VERSION = 1

# Sent to a prefill engine: "compute the KV, keep it for a remote decode to pull".
PREFILL_REQUEST_PARAMS: dict[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}

_KNOWN = (
    "remote_engine_id",
    "remote_request_id",
    "remote_block_ids",
    "remote_host",
    "remote_port",
    "remote_num_tokens",
    "remote_prefill_cached_tokens",
)


class HandoffError(ValueError):
    """The prefill engine returned no usable transfer parameters."""


@dataclass(frozen=True, slots=True)
class KVHandoff:
    """Where a decode engine pulls a prompt's KV from.

    Made by the prefill server from vLLM's output; consumed by the decode server, which turns
    it back into vLLM's dict with `to_decode_params()`.
    """

    remote_engine_id: str
    remote_request_id: str
    remote_block_ids: list[list[int]]
    remote_host: str
    remote_port: int
    remote_num_tokens: int
    remote_prefill_cached_tokens: int
    passthrough: dict[str, Any] = field(default_factory=dict)
    format_version: int = HANDOFF_FORMAT_VERSION

    @property
    def num_blocks(self) -> int:
        """KV blocks the decode side will read."""
        return sum(len(group) for group in self.remote_block_ids)

    @classmethod
    def from_vllm(cls, params: dict[str, Any] | None) -> KVHandoff:
        """Wrap vLLM's kv_transfer_params from a finished remote-decode prefill."""
        if not params or not params.get("remote_engine_id"):
            raise HandoffError(
                "prefill engine returned no kv_transfer_params; is the NixlConnector "
                "configured with kv_role kv_producer/kv_both?"
            )
        raw_blocks = params.get("remote_block_ids") or []
        # vLLM >= 0.11 sends one list per KV cache group; older versions a flat list.
        if raw_blocks and isinstance(raw_blocks[0], int):
            blocks = [list(raw_blocks)]
        else:
            blocks = [list(group) for group in raw_blocks]
        return cls(
            remote_engine_id=str(params["remote_engine_id"]),
            remote_request_id=str(params.get("remote_request_id") or ""),
            remote_block_ids=blocks,
            remote_host=str(params["remote_host"]),
            remote_port=int(params["remote_port"]),
            remote_num_tokens=int(params.get("remote_num_tokens") or 0),
            remote_prefill_cached_tokens=int(params.get("remote_prefill_cached_tokens") or 0),
            passthrough={
                k: v
                for k, v in params.items()
                if k not in _KNOWN and k not in ("do_remote_prefill", "do_remote_decode")
            },
        )

    def to_decode_params(self) -> dict[str, Any]:
        """vLLM's kv_transfer_params for the decode request that pulls this KV."""
        params: dict[str, Any] = dict(self.passthrough)
        params.update(
            do_remote_prefill=True,
            do_remote_decode=False,
            remote_engine_id=self.remote_engine_id,
            remote_request_id=self.remote_request_id,
            remote_block_ids=self.remote_block_ids,
            remote_host=self.remote_host,
            remote_port=self.remote_port,
            remote_num_tokens=self.remote_num_tokens,
            remote_prefill_cached_tokens=self.remote_prefill_cached_tokens,
        )
        return params
