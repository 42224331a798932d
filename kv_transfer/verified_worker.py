"""The worker half of the verified NIXL connector (see verified_connector.py for the flow).

Producer: after the forward pass of the step in which a verified prompt's last chunk ran, digest
its blocks (`producer_digests`) — the scheduler half puts them into the handoff.
Consumer: when vLLM reports a pull finished (`check_received`), digest the blocks that landed
and compare them with the producer's; blocks that differ are reported to vLLM as failed loads
(`kv_load_failure_policy: recompute` then recomputes the prompt from the first bad block) —
the whole request when the model has several KV-cache groups (vLLM maps block-level failures
to requests only with one).

Called from the model runner's thread, once per engine step. The digester is built on first
use, after vLLM registered the KV caches with NIXL.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from typing import Any

from pdserve.kv_transfer.digest import BlockDigester
from pdserve.kv_transfer.faults import FaultSwitch
from pdserve.kv_transfer.integrity import HandoffIntegrity, bad_blocks, external_request_id
from pdserve.kv_transfer.verified_stats import IntegrityCounts

log = logging.getLogger("pdserve.kv_integrity")

MAX_EXPECTED = 100_000
"""Pulls awaited at once, at most (the oldest is dropped beyond: a pull that never finished,
e.g. its request aborted)."""
CORRUPT_VALUE = 3.0
"""What the corrupt_kv fault hook writes into every element of a request's blocks."""


class IntegrityWorker:
    """`nixl_worker`: vLLM's NIXL worker (its KV caches, TP rank and failed-block queue)."""

    def __init__(
        self,
        nixl_worker: Any,
        kv_cache_config: Any,
        counts: IntegrityCounts,
        faults: FaultSwitch,
        clock_unix_s: Callable[[], float] = time.time,
    ):
        self._nixl = nixl_worker
        self._kv_cache_config = kv_cache_config
        self._counts = counts
        self._faults = faults
        self._clock = clock_unix_s
        self._digester: BlockDigester | None = None
        self._to_digest: dict[str, list[int]] = {}
        self._expect: dict[str, tuple[HandoffIntegrity | None, list[int]]] = {}

    @property
    def tp_rank(self) -> int:
        return int(getattr(self._nixl, "tp_rank", 0))

    def _groups(self) -> int:
        return len(self._kv_cache_config.kv_cache_groups)

    def digester(self) -> BlockDigester:
        if self._digester is None:
            layers = set(self._kv_cache_config.kv_cache_groups[0].layer_names)
            caches = {k: v for k, v in self._nixl.device_kv_caches.items() if k in layers}
            ratio = int(getattr(self._nixl, "_physical_blocks_per_logical_kv_block", 1))
            self._digester = BlockDigester(
                caches, self._kv_cache_config.num_blocks * ratio, physical_per_logical=ratio
            )
        return self._digester

    def on_metadata(self, meta: Any) -> None:
        """The step's connector metadata (start_load_kv): what to digest, what to expect."""
        self._to_digest.update(getattr(meta, "pdserve_digest", None) or {})
        for req_id, record in (getattr(meta, "pdserve_expect", None) or {}).items():
            recv = meta.reqs_to_recv.get(req_id)
            if recv is not None and recv.local_block_ids:
                local = list(recv.local_block_ids[0])
                self._expect[req_id] = (HandoffIntegrity.from_wire(record), local)
        while len(self._expect) > MAX_EXPECTED:
            del self._expect[next(iter(self._expect))]

    def producer_digests(self) -> dict[str, dict[int, tuple[list[int], list[int]]]]:
        """After the forward pass: req_id -> {tp rank: (blocks, digests)} for the prompts that
        finished in this step (then, if the corrupt_kv fault is on, corrupt those blocks)."""
        if not self._to_digest:
            return {}
        work, self._to_digest = self._to_digest, {}
        digester = self.digester()
        out = {}
        for req_id, blocks in work.items():
            out[req_id] = {self.tp_rank: (blocks, digester.digests(blocks))}
        if self._faults.armed and self._faults.on("corrupt_kv"):
            for req_id, blocks in work.items():
                log.warning("fault hook: corrupting the KV of %s after its digest", req_id)
                digester.overwrite(blocks, CORRUPT_VALUE)
        return out

    def check_received(self, finished_recving: set[str], failed_recving: set[str]) -> None:
        """Check the pulls vLLM just reported finished. Adds requests to `failed_recving`
        (several KV-cache groups) or their bad blocks to vLLM's failed-block queue."""
        for req_id in finished_recving:
            expect = self._expect.pop(req_id, None)
            if expect is None or req_id in failed_recving:
                continue
            record, local = expect
            if record is None or self.tp_rank >= len(record.digests):
                bad = list(local)
                reason = "unverifiable"
            else:
                got = self.digester().digests(local)
                bad = bad_blocks(record.digests[self.tp_rank], local, got)
                stale = self._clock() > record.lease_expires_unix_s
                reason = "stale" if stale else "digest"
            if not bad:
                continue
            log.warning(
                "KV of %s failed its check (%s): %d of %d pulled blocks differ from the "
                "prefill engine's (handoff of %s); recomputing from the first bad block",
                req_id,
                reason,
                len(bad),
                len(local),
                record.request_id if record else "?",
            )
            self._counts.failure(reason, external_request_id(req_id))  # type: ignore[arg-type]
            if self._groups() > 1:
                failed_recving.add(req_id)
            else:
                invalid: queue.Queue[set[int]] = self._nixl._invalid_block_ids
                invalid.put(set(bad))
