"""vLLM's NixlConnector with every handoff checked: loaded by vLLM through
`kv_connector_module_path: pdserve.kv_transfer.verified_connector` (connector_config.py).

The class keeps the name `NixlConnector` (vLLM checks connectors by name in places) and
subclasses vLLM's pull connector; it adds, per request whose kv_transfer_params carry
`pdserve_verify` (the router decides, `kv_transfer.verify`):

  prefill engine                                  decode engine
  step N: prompt's last chunk runs                receives request → identity + lease check
  worker digests its blocks after the forward     (fails: prefill it here, no pull)
  request_finished → handoff + identity record    pull as vLLM does
  same step: worker digests → into the handoff    pull done → digest the landed blocks;
                                                  a mismatch → vLLM recomputes from the first
                                                  bad block (kv_load_failure_policy=recompute)

The halves are verified_scheduler.py and verified_worker.py; the wire record and the pure
checks are integrity.py; the digest is digest.py. Counts travel in vLLM's KV-connector stats
(verified_stats.py). Documented for users in docs/kv-integrity.md.
"""

from __future__ import annotations

from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorRole,
    KVConnectorWorkerMetadata,
)
from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlPullConnector
from vllm.distributed.kv_transfer.kv_connector.v1.nixl.stats import NixlKVConnectorStats

from pdserve.kv_transfer.faults import FaultSwitch
from pdserve.kv_transfer.verified_scheduler import IntegrityScheduler
from pdserve.kv_transfer.verified_stats import KEYS, IntegrityCounts
from pdserve.kv_transfer.verified_worker import IntegrityWorker


class IntegrityStats(NixlKVConnectorStats):
    """vLLM's NIXL stats plus pdserve's integrity keys (verified_stats.KEYS)."""

    def reset(self) -> None:
        super().reset()
        for key in KEYS:
            self.data[key] = []

    def aggregate(self, other: Any) -> Any:
        if not other.is_empty():
            for key, values in other.data.items():
                self.data.setdefault(key, []).extend(values)
        return self

    def is_empty(self) -> bool:
        return super().is_empty() and not any(self.data.get(k) for k in KEYS)

    def add(self, counts: IntegrityCounts) -> None:
        for key, values in counts.take().items():
            self.data.setdefault(key, []).extend(values)


class DigestsMetadata(KVConnectorWorkerMetadata):
    """Worker → scheduler, per step: req_id -> {tp rank: (blocks, digests)}."""

    def __init__(self, digests: dict[str, dict[int, tuple[list[int], list[int]]]]):
        self.digests = digests

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        if isinstance(other, DigestsMetadata):
            for req_id, ranks in other.digests.items():
                self.digests.setdefault(req_id, {}).update(ranks)
        return self


def _model_name(vllm_config: Any) -> str:
    served = vllm_config.model_config.served_model_name
    if isinstance(served, list | tuple):
        served = served[0] if served else None
    return str(served or vllm_config.model_config.model)


class NixlConnector(NixlPullConnector):
    """vLLM's pull NixlConnector, with each verified handoff checked (module docstring)."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any):
        super().__init__(vllm_config, role, kv_cache_config)
        self._integrity_counts = IntegrityCounts()
        self._integrity_scheduler: IntegrityScheduler | None = None
        self._integrity_worker: IntegrityWorker | None = None
        if role == KVConnectorRole.SCHEDULER:
            extra = vllm_config.kv_transfer_config.kv_connector_extra_config
            self._integrity_scheduler = IntegrityScheduler(
                model=_model_name(vllm_config),
                lease_s=float(extra.get("kv_lease_duration", 30)),
                tp_rank_count=vllm_config.parallel_config.tensor_parallel_size,
                counts=self._integrity_counts,
                track_all=FaultSwitch.from_env().armed,
            )
        elif role == KVConnectorRole.WORKER:
            self._integrity_worker = IntegrityWorker(
                self.connector_worker, kv_cache_config, self._integrity_counts,
                FaultSwitch.from_env(),
            )  # fmt: skip

    # ---- scheduler side --------------------------------------------------------------

    def bind_kv_cache_manager(self, kv_cache_manager: Any) -> None:
        super().bind_kv_cache_manager(kv_cache_manager)
        if self._integrity_scheduler is not None:
            self._integrity_scheduler.bind(kv_cache_manager)

    def on_new_request(self, request: Any) -> None:
        if self._integrity_scheduler is not None:
            self._integrity_scheduler.check_arrival(request)
        super().on_new_request(request)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        if self._integrity_scheduler is not None:
            self._integrity_scheduler.track(request)
        super().update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> Any:
        sched = self._integrity_scheduler
        expect = {}
        if sched is not None and self.connector_scheduler is not None:
            expect = sched.expectations(self.connector_scheduler._reqs_need_recv)
        meta = super().build_connector_meta(scheduler_output)
        if sched is not None:
            meta.pdserve_expect = expect
            meta.pdserve_digest = sched.blocks_to_digest(
                dict(scheduler_output.num_scheduled_tokens)
            )
        return meta

    def _finished(self, request: Any, result: tuple[bool, Any]) -> tuple[bool, Any]:
        if self._integrity_scheduler is not None:
            if result[1] is None:
                self._integrity_scheduler.forget(request.request_id)
            self._integrity_scheduler.on_finished(request, result[1])
        return result

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, Any]:
        return self._finished(request, super().request_finished(request, block_ids))

    def request_finished_all_groups(
        self, request: Any, block_ids: tuple[list[int], ...]
    ) -> tuple[bool, Any]:
        return self._finished(request, super().request_finished_all_groups(request, block_ids))

    def update_connector_output(self, connector_output: Any) -> None:
        meta = connector_output.kv_connector_worker_meta
        if self._integrity_scheduler is not None:
            digests = meta.digests if isinstance(meta, DigestsMetadata) else {}
            self._integrity_scheduler.on_worker_digests(digests)
        super().update_connector_output(connector_output)

    # ---- worker side -----------------------------------------------------------------

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        if self._integrity_worker is not None and self._connector_metadata is not None:
            self._integrity_worker.on_metadata(self._connector_metadata)
        super().start_load_kv(forward_context, **kwargs)

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        if self._integrity_worker is None:
            return None
        digests = self._integrity_worker.producer_digests()
        return DigestsMetadata(digests) if digests else None

    def get_transfer_results(self, finished_req_ids: set[str]) -> Any:
        results = super().get_transfer_results(finished_req_ids)
        if self._integrity_worker is not None:
            self._integrity_worker.check_received(results.finished_recving, results.failed_recving)
        return results

    # ---- stats (both sides) ------------------------------------------------------------

    def get_kv_connector_stats(self) -> Any:
        base = super().get_kv_connector_stats()
        if self._integrity_counts.empty() and (base is None or base.is_empty()):
            return base
        stats = IntegrityStats()
        if base is not None:
            stats.aggregate(base)
        stats.add(self._integrity_counts)
        return stats

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> Any:
        return IntegrityStats(data=data) if data is not None else IntegrityStats()
