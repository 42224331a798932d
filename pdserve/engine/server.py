"""One vLLM engine, in-process, configured for a role (prefill or decode).

Owned by one pool replica (`pdserve.engine.replica.PoolReplica`): built in its constructor,
started with `start()`, shut down with `shutdown()`. The role-specific requests live with
their pools: `pdserve.prefill_pool.produce` (compute KV for a remote decode) and
`pdserve.decode_pool.stream` (pull the KV, generate, shape the stream). All methods run on
the replica's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import zlib
from typing import Any

import psutil

from pdserve.config import PdserveConfig
from pdserve.engine.args import engine_args
from pdserve.engine.liveness import EngineLiveness
from pdserve.engine.pending import PendingPrefills
from pdserve.engine.pinning import pin_engine_threads
from pdserve.engine.start_deadline import EngineStartTimeoutError, StartDeadline
from pdserve.engine.stats import EngineCounters, stat_logger_factory
from pdserve.engine.warmup import warm_up
from pdserve.kv_transfer.connector_config import (
    engine_environment,
    replica_cores,
    side_channel_host,
)
from pdserve.kv_transfer.ports import pick_free_port
from pdserve.messages import EngineStats, EngineTimes
from pdserve.names import PoolName
from pdserve.node import advertised_address

log = logging.getLogger("pdserve.engine")


PING_PERIOD_S = 1.0
"""How often the watchdog pings the engine process (one tiny utility call)."""


ENGINE_SHUTDOWN_GRACE_S = 2.0
"""How long a stopping engine's processes get to exit after SIGTERM before they are killed."""


class EngineRequestError(RuntimeError):
    """The engine failed a request (e.g. a failed KV pull under kv_load_failure_policy=fail)."""


class EngineUnresponsiveError(RuntimeError):
    """The engine process stopped answering (frozen or wedged); its replica must go."""


def _prepare_process(
    config: PdserveConfig, role: PoolName, replica_id: str, local_rank: int
) -> tuple[int, str | None]:
    """Set this replica's engine environment; return its NIXL side-channel port and its
    KV-event endpoint, `tcp://HOST:PORT` (None when events are off).

    Must run before the engine starts: the engine process inherits env and niceness.
    """
    # Ray runs workers at a raised nice level and engine processes inherit it; an engine is
    # the work itself, so give it normal priority back (needs root or CAP_SYS_NICE).
    with contextlib.suppress(PermissionError, OSError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    # Spread replicas over the port range so concurrent starts rarely race for one port.
    offset = (zlib.crc32(replica_id.encode()) % 500) * 4
    # What remote peers must reach binds and is advertised on the node's address: loopback
    # on a single-machine cluster, the node's own address on a multi-node one.
    address = advertised_address("auto", os.environ, _node_ip())
    host = side_channel_host(config, address)
    port = pick_free_port(config.kv_transfer.side_channel_base_port + offset, host)
    os.environ.update(engine_environment(config, role, port, address, local_rank))
    # The KV cache size is the engine argument kv_cache_memory_bytes (exact bytes); an inherited
    # VLLM_CPU_KVCACHE_SPACE (whole GiB, vLLM's legacy knob) would override it.
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    # Tells `pdserve down` which cluster these engine processes belong to.
    os.environ["PDSERVE_GCS_ADDRESS"] = _gcs_address()
    pool = config.pool(role)
    if not pool.engine.kv_events:
        return port, None
    events_port = pick_free_port(config.kv_transfer.kv_events_base_port + offset, address)
    # The vLLM plugin (pdserve.kv_transfer.vllm_plugin) makes the publisher bind this address.
    os.environ["PDSERVE_KV_EVENTS_BIND"] = "1"
    return port, f"tcp://{address}:{events_port}"


def _thread_ids(procs: list[psutil.Process]) -> list[int]:
    """Every thread of `procs` (processes that have exited are skipped)."""
    tids: list[int] = []
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            tids.extend(t.id for t in proc.threads())
    return tids


def _gcs_address() -> str:
    import ray

    if not ray.is_initialized():  # not inside Ray (asking would connect to a cluster)
        return ""
    return str(ray.get_runtime_context().gcs_address)


def _node_ip() -> str:
    import ray

    if not ray.is_initialized():  # not inside Ray (e.g. a test's lone engine): one machine
        return "127.0.0.1"
    return str(ray.util.get_node_ip_address())


def engine_times(output: Any) -> EngineTimes | None:
    """One request's timestamps from a vLLM RequestOutput (None before its first token)."""
    m = getattr(output, "metrics", None)
    if m is None or not getattr(m, "first_token_ts", 0.0):
        return None
    return EngineTimes(
        queued_s=m.queued_ts or m.scheduled_ts,
        scheduled_s=m.scheduled_ts,
        first_token_s=m.first_token_ts,
    )


class EngineServer:
    """A vLLM AsyncLLM for one role (with NixlConnector unless the deployment is aggregated).

    Call `start()` once (30-60 s on CPU); then the pool's request code uses `engine` (the
    AsyncLLM) concurrently; `shutdown()` once at the end. While it runs, a watchdog pings
    the engine process every PING_PERIOD_S (see `EngineLiveness`).
    """

    def __init__(
        self,
        config: PdserveConfig,
        role: PoolName,
        model_path: str,
        replica_id: str,
        local_rank: int = 0,
    ):
        """`local_rank`: the replica's rank among its pool's replicas on this node (picks its
        entry of cpu_cores_per_replica)."""
        self._config = config
        self.role: PoolName = role
        self.replica_id = replica_id
        self._model_path = model_path
        self._counters = EngineCounters()
        self.pending = PendingPrefills()
        """Prompts accepted and not yet prefilled (reported as the replica's prefill queue)."""
        self._engine: Any = None
        pool = config.pool(role)
        self._liveness = EngineLiveness(pool.unresponsive_after_seconds, time.monotonic)
        self._watchdog: asyncio.Task[None] | None = None
        self._engine_procs: list[psutil.Process] = []
        self._cores = replica_cores(config, role, local_rank) if pool.pin_engine_core else None
        self.side_channel_port, self.kv_events_endpoint = _prepare_process(
            config, role, replica_id, local_rank
        )

    async def start(self) -> None:
        """Start the engine and wait until it can serve: within the pool's
        engine_start_timeout_seconds (warm-up included), else its processes are killed and
        EngineStartTimeoutError is raised (see pdserve.engine.start_deadline)."""
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            **engine_args(self._config, self.role, self._model_path, self.kv_events_endpoint)
        )
        log.info("starting %s engine (NIXL side channel :%d)", self.role, self.side_channel_port)
        loggers: list[Any] = [stat_logger_factory(self._counters)]
        pool = self._config.pool(self.role)
        if pool.engine.export_vllm_metrics:
            from vllm.v1.metrics.ray_wrappers import RayPrometheusStatLogger

            loggers.append(RayPrometheusStatLogger)
        timeout_s = pool.engine_start_timeout_s(self._config.platform)
        started_s = time.monotonic()
        me = psutil.Process()
        before = {p.pid for p in me.children(recursive=True)}

        def new_processes() -> list[psutil.Process]:
            return [p for p in me.children(recursive=True) if p.pid not in before]

        deadline = StartDeadline(timeout_s, new_processes)
        with deadline:
            try:
                self._engine = AsyncLLM.from_engine_args(args, stat_loggers=loggers)
            except Exception as exc:
                if deadline.fired:
                    raise self._start_timed_out(deadline) from exc
                raise
            in_time = deadline.disarm()
        self._engine_procs = new_processes()
        if not in_time:  # it fired as the engine came up: its processes are gone
            self._abandon()
            raise self._start_timed_out(deadline)
        if self._cores:  # None or empty: the OS places the engine
            moved = pin_engine_threads(_thread_ids(self._engine_procs), set(self._cores))
            log.info("%s engine: %d threads pinned to cores %s", self.role, moved, self._cores)
        self._liveness.answered()
        self._watchdog = asyncio.get_running_loop().create_task(self._watch())
        left_s = timeout_s - (time.monotonic() - started_s)
        try:
            await asyncio.wait_for(self._warm_up(), timeout=max(left_s, 0.0))
        except TimeoutError:
            deadline.expire()
            self._abandon()
            raise self._start_timed_out(deadline) from None

    def _start_timed_out(self, deadline: StartDeadline) -> EngineStartTimeoutError:
        msg = (
            f"the {self.role} engine was not ready within its start deadline "
            f"({deadline.timeout_s:g} s, engine_start_timeout_seconds); killed its "
            f"processes {deadline.killed_pids}; the replica fails (Ray Serve replaces it, "
            "up to its retry limit)"
        )
        log.error(msg)
        return EngineStartTimeoutError(msg)

    def _abandon(self) -> None:
        """After a failed start: stop the watchdog, kill what the engine started, drop it."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._kill_engine_processes()
        engine, self._engine = self._engine, None
        if engine is not None:
            with contextlib.suppress(Exception):
                engine.shutdown()

    async def _warm_up(self) -> None:
        """Before the replica reports ready: the pool's warm-up (pdserve.engine.warmup), so
        the engine has run its longest prefill and a full multi-sequence step that splits a
        prompt before any client request reaches it."""
        times = await warm_up(
            self.engine,
            self._config.pool(self.role).engine,
            self._config.platform,
            self._config.model.max_model_len_tokens,
            f"pdserve-warmup-{self.role}-{self.replica_id}",
        )
        if times.prompt_tokens:
            log.info(
                "%s engine warm-up: a %d-token prefill took %.2f s; %d prompts at once %.2f s",
                self.role,
                times.prompt_tokens,
                times.prompt_s,
                len(times.burst_tokens),
                times.burst_s,
            )

    async def _watch(self) -> None:
        """Ping the engine process every PING_PERIOD_S and record each answer. A frozen
        engine never answers (this call then waits until it does); a dead one raises."""
        while self._engine is not None:
            try:
                await self._engine.is_sleeping()  # a round trip to the engine-core process
            except Exception as exc:
                if self.dead:  # vLLM's own check_health reports it
                    return
                # Not an answer: keep pinging (a failing ping for long is unresponsive).
                log.warning("%s engine ping failed: %r", self.role, exc)
            else:
                self._liveness.answered()
            await asyncio.sleep(PING_PERIOD_S)

    @property
    def engine(self) -> Any:
        """The running vLLM AsyncLLM. Raises if the engine was never started or is shut down."""
        if self._engine is None:
            raise EngineRequestError(f"the {self.role} engine is not running")
        return self._engine

    def stats(self) -> EngineStats:
        """Current engine counters (cheap; no engine round trip)."""
        return self._counters.snapshot()

    @property
    def dead(self) -> bool:
        """The engine was started and has died since (its process was killed or crashed)."""
        return self._engine is not None and bool(self._engine.errored)

    @property
    def unresponsive(self) -> bool:
        """The engine runs but has not answered a ping for unresponsive_after_seconds."""
        return self._engine is not None and self._liveness.unresponsive

    async def check_health(self) -> None:
        """Raise if the engine cannot serve: vLLM's own health check (EngineDeadError once its
        engine-core process is gone), or EngineUnresponsiveError once it stopped answering
        pings and the routers were told (see `EngineLiveness.replace`); an unresponsive
        engine's processes are killed first (a frozen process would otherwise outlive its
        replica: it cannot act on a shutdown request)."""
        if self.unresponsive and self._liveness.replace:
            reason = self._liveness.describe()
            log.error("%s engine unresponsive: %s; killing it", self.role, reason)
            self._kill_engine_processes()
            raise EngineUnresponsiveError(reason)
        await self.engine.check_health()

    @property
    def reports_signals(self) -> bool:
        """Whether this replica's scaling signals mean anything: a dead or unresponsive engine
        reports none (Ray Serve replaces it; its signals would mislead the pool's policy)."""
        return not (self.dead or self.unresponsive)

    def queued_prefill_s(self) -> float:
        """The prefill work this engine accepted and has not prefilled, in cost-model seconds."""
        queued = self.pending.snapshot()
        cost = self._config.router.routing.cost_model
        return cost.est_backlog_s(queued.num_tokens, queued.num_requests)

    def take_kv_verdict(self, request_id: str) -> str | None:
        """Why the engine recomputed this request's prompt instead of using its KV handoff
        (an integrity failure reason), or None; read once, by the decode stream."""
        return self._counters.take_verdict(request_id)

    def take_itl_s(self) -> float:
        """vLLM's mean inter-token latency since the last call (0.0 when idle); restarts it."""
        return self._counters.take_itl_s()

    def routing_stats(self) -> dict[str, Any]:
        """What the router's replica view needs (Ray Serve polls it; see record_routing_stats).

        Plain JSON-able values; `kv_events_endpoint` None means this engine publishes no KV
        events (the router then falls back to its approximate prefix index). Only
        `healthy: false` once the engine is dead or unresponsive: the router's view marks the
        replica unhealthy and stops routing to it while Ray Serve replaces it.
        """
        if self.dead:
            return {"healthy": False}
        if self.unresponsive:
            self._liveness.announced()  # the health check replaces it a little later
            return {"healthy": False}
        s = self._counters.snapshot()
        cache = self._engine.vllm_config.cache_config if self._engine is not None else None
        queued = self.pending.snapshot()
        return {
            "num_running_requests": s.num_running_requests,
            "num_waiting_requests": s.num_waiting_requests,
            # The prefill work this engine has accepted and not finished (uncached prompt
            # tokens), read by every router's placement: queued seconds = the cost model's.
            "queued_prefill_tokens": queued.num_tokens,
            "num_queued_prefills": queued.num_requests,
            "kv_cache_usage": s.kv_cache_usage,
            "block_size_tokens": cache.block_size if cache is not None else 0,
            "num_kv_blocks": (cache.num_gpu_blocks or 0) if cache is not None else 0,
            "kv_events_endpoint": self.kv_events_endpoint,
            "kv_transfer_failures_total": s.num_kv_transfer_failures_total,
            "kv_expired_total": s.num_kv_expired_total,
            "kv_integrity": self._counters.integrity(),
            # Engine-measured histograms (pdserve.messages.BucketCounts), cumulative; the router
            # sums them per pool (router/engine_histograms.py).
            "kv_transfer_seconds": self._counters.kv_transfer_seconds.report(),
            "kv_transfer_bytes": self._counters.kv_transfer_bytes.report(),
            "decode_stall_seconds": self._counters.decode_stall_seconds.report(),
        }

    def _kill_engine_processes(self) -> None:
        """SIGKILL the processes the engine started (delivered even to a stopped process)."""
        for proc in self._engine_procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()

    def shutdown(self) -> None:
        """Stop the engine process now (idempotent; safe from `__del__`): vLLM's own shutdown
        with ENGINE_SHUTDOWN_GRACE_S for its processes to exit (its workers exit within ~2 s;
        the engine core then takes ~3 s more over its teardown, which vLLM would wait up to 5
        s for), then SIGKILL for any left. The replica has drained its requests by then."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._engine is not None:
            self._engine.shutdown(timeout=ENGINE_SHUTDOWN_GRACE_S)
            self._engine = None
            self._kill_engine_processes()  # any that ignored the shutdown (frozen)
