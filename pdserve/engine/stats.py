"""Engine counters, fed by vLLM's stat-logger hook (`AsyncLLM(stat_loggers=[...])`).

vLLM calls `record()` from the engine's output loop after every step, in the replica process.
`EngineCounters` is owned by the engine server and read by it on demand (`snapshot()`, an
`EngineStats` message; the histograms as `BucketCounts`, both from pdserve.messages).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from pdserve.itl_budget import STALL_KEY
from pdserve.kv_transfer.integrity import FAILURE_REASONS
from pdserve.kv_transfer.verified_stats import CHECKS_KEY, FAILED_KEY
from pdserve.messages import BYTES_BUCKETS, SECONDS_BUCKETS, BucketCounts, EngineStats

MAX_VERDICTS = 10_000
"""Per-request integrity verdicts kept until the decode stream reads them (oldest dropped)."""


class EngineCounters:
    """Accumulates vLLM scheduler/iteration stats into `EngineStats`. Not thread-safe: vLLM
    records from the replica's event loop, and `snapshot()` is read from the same loop."""

    def __init__(self) -> None:
        self._running = 0
        self._waiting = 0
        self._kv_usage = 0.0
        self._computed = 0
        self._cache_hit = 0
        self._transferred = 0
        self._generated = 0
        self._xfers = 0
        self._xfer_failures = 0
        self._expired = 0
        self._after_expiry = 0
        self._integrity_checks = 0
        self._integrity_failures = dict.fromkeys(FAILURE_REASONS, 0)
        self._verdicts: OrderedDict[str, str] = OrderedDict()
        self._xfer_bytes = 0
        self._xfer_seconds = 0.0
        self._itl_sum_s = 0.0
        self._itl_count = 0
        # NIXL's own per-transfer time and size (the pulling engine's connector measures them).
        self.kv_transfer_seconds = BucketCounts(SECONDS_BUCKETS)
        self.kv_transfer_bytes = BucketCounts(BYTES_BUCKETS)
        # Steps that carried prefill next to decoding streams (pdserve.engine.itl_scheduler):
        # each step's seconds, once per stream that waited on it.
        self.decode_stall_seconds = BucketCounts(SECONDS_BUCKETS)

    def record(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        """Fold one engine step's stats in (called by `PdserveStatLogger`)."""
        if scheduler_stats is not None:
            self._running = scheduler_stats.num_running_reqs
            self._waiting = scheduler_stats.num_waiting_reqs
            self._kv_usage = scheduler_stats.kv_cache_usage
            connector = scheduler_stats.kv_connector_stats
            if connector:
                self._fold_connector(connector)
        if iteration_stats is not None:
            tokens = iteration_stats.prompt_token_stats
            self._computed += tokens.computed
            self._cache_hit += tokens.local_cache_hit
            self._transferred += tokens.external_kv_transfer
            self._generated += iteration_stats.num_generation_tokens
            itl = iteration_stats.inter_token_latencies_iter
            if itl:
                self._itl_sum_s += float(sum(itl))
                self._itl_count += len(itl)

    def _fold_connector(self, data: dict[str, Any]) -> None:
        durations = data.get("transfer_duration") or []
        sizes = data.get("bytes_transferred") or []
        self._xfers += len(durations)
        self._xfer_seconds += float(sum(durations))
        self._xfer_bytes += int(sum(sizes))
        for seconds in durations:
            self.kv_transfer_seconds.observe(float(seconds))
        for size in sizes:
            self.kv_transfer_bytes.observe(float(size))
        self._xfer_failures += sum(
            len(data.get(key) or [])
            for key in ("num_failed_transfers", "num_failed_handshakes", "num_failed_notifications")
        )
        self._expired += len(data.get("num_kv_expired_reqs") or [])
        self._after_expiry += len(data.get("num_notifications_after_expiry") or [])
        for step_s, streams in data.get(STALL_KEY) or []:
            self.decode_stall_seconds.observe(float(step_s), int(streams))
        self._integrity_checks += len(data.get(CHECKS_KEY) or [])
        for request_id, reason in data.get(FAILED_KEY) or []:
            if reason in self._integrity_failures:
                self._integrity_failures[reason] += 1
            self._verdicts[request_id] = reason
            while len(self._verdicts) > MAX_VERDICTS:
                self._verdicts.popitem(last=False)

    def take_verdict(self, request_id: str) -> str | None:
        """Why this (decode) engine did not use the request's KV handoff and recomputed the
        prompt (an integrity FailureReason), or None; forgets it once read."""
        return self._verdicts.pop(request_id, None)

    def integrity(self) -> dict[str, object]:
        """Cumulative KV-integrity counts (see pdserve.kv_transfer.integrity)."""
        return {
            "checks": self._integrity_checks,
            "failures": dict(self._integrity_failures),
            "notifications_after_expiry": self._after_expiry,
        }

    def take_itl_s(self) -> float:
        """Mean inter-token latency (vLLM's own, per token) of the tokens generated since the
        last call, 0.0 when none; starts a new window."""
        mean = self._itl_sum_s / self._itl_count if self._itl_count else 0.0
        self._itl_sum_s, self._itl_count = 0.0, 0
        return mean

    def snapshot(self) -> EngineStats:
        """The current counters."""
        return EngineStats(
            num_running_requests=self._running,
            num_waiting_requests=self._waiting,
            kv_cache_usage=self._kv_usage,
            prompt_tokens_computed_total=self._computed,
            prompt_tokens_local_cache_hit_total=self._cache_hit,
            prompt_tokens_kv_transfer_total=self._transferred,
            generation_tokens_total=self._generated,
            num_kv_transfers_total=self._xfers,
            num_kv_transfer_failures_total=self._xfer_failures,
            num_kv_expired_total=self._expired,
            kv_transfer_bytes_total=self._xfer_bytes,
            kv_transfer_seconds_total=self._xfer_seconds,
        )


def stat_logger_factory(counters: EngineCounters) -> Any:
    """A vLLM StatLoggerFactory whose loggers feed `counters`."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class PdserveStatLogger(StatLoggerBase):  # type: ignore[misc]  # vLLM is Any to mypy
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self._counters = counters

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            self._counters.record(scheduler_stats, iteration_stats)

        def log_engine_initialized(self) -> None:
            pass

    return PdserveStatLogger
