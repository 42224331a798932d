"""The scheduler half of the verified NIXL connector: what one engine's scheduler adds to
vLLM's NixlConnector (see verified_connector.py for the whole flow).

Producer (prefill engine), for requests whose kv_transfer_params ask for verification:
1. `blocks_to_digest`, each step: the requests whose prompt's last chunk runs in this step,
   with their block ids, for the worker to digest after the forward pass.
2. `on_finished`: the handoff vLLM returns gets the `HandoffIntegrity` record (identity,
   lease end) — without digests: in vLLM's step the request finishes before the step's worker
   output is read.
3. `on_worker_digests`, later in the same step: the worker's digests go into that same
   handoff dict, before vLLM sends the step's outputs (they are serialised after the step).

Consumer (decode engine):
4. `check_arrival`, when the scheduler receives a request: identity and lease; a failing
   handoff is stripped (the engine prefills the prompt itself; the producer's lease frees
   the blocks) and counted.
5. `expectations`, when the pull is planned: the digests the worker checks the pulled blocks
   against (worker half: verified_worker.py).

Single-threaded: vLLM calls all of this from the engine core's scheduler loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from pdserve.kv_transfer.integrity import (
    EXPECT_KEY,
    INTEGRITY_KEY,
    VERIFY_KEY,
    FailureReason,
    HandoffIntegrity,
    external_request_id,
    identity_failure,
    prompt_sha256,
)
from pdserve.kv_transfer.verified_stats import IntegrityCounts

log = logging.getLogger("pdserve.kv_integrity")

MAX_TRACKED = 100_000
"""Bound on requests tracked between steps (aborted ones are dropped at request_finished)."""


class IntegrityScheduler:
    """State and checks of one engine's scheduler. `clock_unix_s` is injected for tests."""

    def __init__(
        self,
        *,
        model: str,
        lease_s: float,
        tp_rank_count: int,
        counts: IntegrityCounts,
        clock_unix_s: Callable[[], float] = time.time,
        track_all: bool = False,
    ):
        """`track_all`: hand every remote-decode prompt to the worker at its last chunk, also
        unverified ones (only while a fault file is configured: the corrupt_kv hook must
        corrupt unverified requests too, so that its tests can fail)."""
        self._track_all = track_all
        self._model = model
        self._lease_s = lease_s
        self._tp_ranks = tp_rank_count
        self._counts = counts
        self._clock = clock_unix_s
        self._kv_cache_manager: Any = None
        self._producing: dict[str, Any] = {}
        """req_id -> Request: verified prefills whose prompt has not finished yet."""
        self._digested: dict[str, list[int]] = {}
        """req_id -> blocks handed to the worker in the step the prompt finished."""
        self._awaiting: dict[str, tuple[dict[str, Any], list[int]]] = {}
        """req_id -> (the handoff dict vLLM returned, its block ids), until the digests come."""

    def bind(self, kv_cache_manager: Any) -> None:
        self._kv_cache_manager = kv_cache_manager

    # ---- producer ----------------------------------------------------------------------

    def track(self, request: Any) -> None:
        """A request was allocated blocks (vLLM's update_state_after_alloc)."""
        params = request.kv_transfer_params or {}
        tracked = params.get("do_remote_decode") and (self._track_all or params.get(VERIFY_KEY))
        if tracked and len(self._producing) < MAX_TRACKED:
            self._producing[request.request_id] = request

    def blocks_to_digest(self, num_scheduled_tokens: dict[str, int]) -> dict[str, list[int]]:
        """Requests whose prompt completes in this step -> their blocks (first KV group).

        Called from build_connector_meta, before vLLM advances num_computed_tokens."""
        out: dict[str, list[int]] = {}
        if self._kv_cache_manager is None:
            return out
        for req_id, n in num_scheduled_tokens.items():
            request = self._producing.get(req_id)
            if request is None or request.num_computed_tokens + n < request.num_prompt_tokens:
                continue
            del self._producing[req_id]
            blocks = list(self._kv_cache_manager.get_block_ids(req_id)[0])
            out[req_id] = blocks
            self._digested[req_id] = blocks
        return out

    def on_finished(self, request: Any, params: dict[str, Any] | None) -> None:
        """vLLM's request_finished returned `params` (None: no handoff) for `request`."""
        req_id = request.request_id
        self._producing.pop(req_id, None)
        blocks = self._digested.pop(req_id, None)
        asked = (request.kv_transfer_params or {}).get(VERIFY_KEY)
        if not params or not params.get("do_remote_prefill") or not asked:
            return
        record = HandoffIntegrity(
            request_id=external_request_id(request.request_id),
            prompt_sha256=prompt_sha256(request.prompt_token_ids or []),
            num_prompt_tokens=len(request.prompt_token_ids or []),
            model=self._model,
            lease_expires_unix_s=self._clock() + self._lease_s,
        )
        params[INTEGRITY_KEY] = record.to_wire()
        remote = params.get("remote_block_ids") or ()
        sent = list(remote[0]) if remote else []
        if blocks is not None and blocks[: len(sent)] == sent:
            self._awaiting[req_id] = (params, sent)
        else:
            # Without digests the decode engine recomputes it ("unverifiable"): fail closed.
            log.warning("no KV digest for %s: its blocks were not seen finishing", req_id)

    def on_worker_digests(self, digests: dict[str, dict[int, tuple[list[int], list[int]]]]) -> None:
        """The step's worker output: req_id -> tp rank -> (blocks digested, digests)."""
        for req_id, (params, sent) in list(self._awaiting.items()):
            per_rank = digests.get(req_id)
            del self._awaiting[req_id]
            if per_rank is None or len(per_rank) != self._tp_ranks:
                log.warning("no KV digest from every worker for %s", req_id)
                continue
            ranks: list[list[int]] = []
            for rank in range(self._tp_ranks):
                blocks, values = per_rank[rank]
                ranks.append(values[: len(sent)] if blocks[: len(sent)] == sent else [])
            params[INTEGRITY_KEY]["digests"] = ranks

    # ---- consumer ----------------------------------------------------------------------

    def check_arrival(self, request: Any) -> None:
        """A decode request reached the scheduler (before vLLM's on_new_request starts its
        heartbeats). A handoff that fails is stripped so the engine prefills it itself."""
        params = request.kv_transfer_params
        if not params or not params.get("do_remote_prefill") or not params.get(VERIFY_KEY):
            return
        self._counts.check()
        remote = params.get("remote_block_ids") or ()
        reason = identity_failure(
            HandoffIntegrity.from_wire(params.get(INTEGRITY_KEY)),
            expected_request_id=params.get(EXPECT_KEY),
            prompt_token_ids=request.prompt_token_ids or [],
            model=self._model,
            num_remote_blocks=len(remote[0]) if remote else 0,
            tp_rank=0,
            now_unix_s=self._clock(),
            digests_comparable=self.digests_comparable(params),
        )
        if reason is not None:
            self.strip(request, reason)

    def digests_comparable(self, params: dict[str, Any]) -> bool:
        """Whether the producer's per-rank digests describe this engine's ranks' bytes: the
        same tensor-parallel size on both sides (vLLM puts the producer's in `tp_size`)."""
        return int(params.get("tp_size") or 1) == self._tp_ranks

    def strip(self, request: Any, reason: FailureReason) -> None:
        params = request.kv_transfer_params
        log.warning(
            "KV handoff for %s not used (%s): handoff of %s from %s; recomputing the prompt",
            external_request_id(request.request_id),
            reason,
            params.get("remote_request_id"),
            params.get("remote_engine_id"),
        )
        params["do_remote_prefill"] = False
        params["remote_block_ids"] = None
        self._counts.failure(reason, external_request_id(request.request_id))

    def expectations(self, reqs_need_recv: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """req_id -> the wire record, for the verified requests whose pull is being planned
        and whose digests this engine can compare (vLLM's `_reqs_need_recv` before
        build_connector_meta clears it)."""
        out: dict[str, dict[str, Any]] = {}
        for req_id, entry in reqs_need_recv.items():
            params = entry[0].kv_transfer_params or {}
            record = params.get(INTEGRITY_KEY)
            verified = params.get(VERIFY_KEY) and record and any(entry[1])
            if verified and self.digests_comparable(params):
                out[req_id] = record
        return out

    def forget(self, req_id: str) -> None:
        """A request ended without a handoff (aborted, failed)."""
        self._producing.pop(req_id, None)
        self._digested.pop(req_id, None)
