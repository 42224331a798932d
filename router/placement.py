"""Per-request placement: the routing policy applied to the router's replica view.

`Placer` is built once per router replica and called once per request (`place`), then told
when the request's remote prefill ends (`prefill_done`). It owns the router-local state the
policy needs: the outstanding prefill work per replica and, in approximate mode, the routing
history that stands in for KV events.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pdserve.config import AdmissionConfig
from pdserve.names import PolicyName, PoolName
from pdserve.router.admission import check_decode_streams, check_prefill_backlog
from pdserve.router.block_hashes import block_hashes
from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.pipeline import RoutingPolicy
from pdserve.router.policy.state import OpenStreams, OutstandingWork
from pdserve.router.policy.types import Decision, NoReplicaError, ReplicaSnapshot, RequestSummary
from pdserve.router.replica_view import ReplicaView


class Placer:
    """Decides prefill replica (or local prefill), decode replica and engine priority."""

    def __init__(
        self,
        policy_config: PolicyConfig,
        view: ReplicaView,
        clock: Callable[[], float] = time.monotonic,
        *,
        policy: PolicyName,
        admission: AdmissionConfig | None = None,
        aggregated: bool = False,
    ):
        """`admission` None: no prefill-backlog or decode-stream bounds. `aggregated`: the
        deployment has no prefill pool (every prompt prefills on its decode replica)."""
        self._policy_config = policy_config
        self._aggregated = aggregated
        self._policy = RoutingPolicy(policy_config, policy=policy, aggregated=aggregated)
        self._view = view
        self._work = OutstandingWork()
        self._clock = clock
        self._queued: dict[str, tuple[str, int]] = {}  # request id -> (pool, prompt tokens)
        self._queued_tokens = {"prefill": 0, "decode": 0}
        self._admission = admission or AdmissionConfig(
            max_inflight_requests=None, max_prefill_backlog_seconds=None, max_decode_streams=None
        )
        self._streams = OpenStreams()  # decode replica id -> open streams
        self._stream_of: dict[str, str] = {}  # request id -> its decode replica

    @property
    def view(self) -> ReplicaView:
        return self._view

    def place(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        client_priority: int,
        policy: PolicyName | None,
        *,
        itl_guard: bool | None = None,
        pace: bool | None = None,
    ) -> Decision | None:
        """The decision for one request; None until the replica view is ready (the first
        requests after start-up are then placed by load alone). Raises NoReplicaError (503)
        when a pool that had replicas has none left (all dead or being replaced): waiting
        in Ray Serve's queue for a replacement engine would hold the request for minutes."""
        now = self._clock()
        self._view.refresh(now)
        if not self._view.ready:
            empty = self._view.emptied_pool()
            if empty is not None:  # it served before: a pool lost every replica
                raise NoReplicaError(empty, "every replica is gone or being replaced")
            return None
        block_size = self._view.block_size_tokens
        if block_size != self._policy.config.block_size_tokens:
            # Hash prompts with the engines' own KV block size (KV events use it too).
            self._policy = RoutingPolicy(
                self._policy_config.model_copy(update={"block_size_tokens": block_size}),
                policy=self._policy.policy,
                aggregated=self._aggregated,
            )
        summary = RequestSummary(
            request_id=request_id,
            num_prompt_tokens=len(prompt_token_ids),
            block_hashes=block_hashes(prompt_token_ids, block_size),
            client_priority=client_priority,
            arrival_time_s=now,
        )
        decision = self._policy.decide(
            summary,
            self._view.snapshots("prefill"),
            self._view.snapshots("decode"),
            self._view.index,
            self._work,
            now,
            policy=policy,
            open_streams=self._streams,
            itl_guard=itl_guard,
            pace=pace,
        )
        self._admit(decision)
        prefilling = decision.prefill_replica_id or decision.decode_replica_id
        d = decision.decode_replica_id
        self._streams.add(d, 1)
        self._stream_of[request_id] = d
        self._work.start(
            prefilling, request_id, decision.est_prefill_s, decision.engine_priority, now
        )
        pool = "decode" if decision.prefill_is_local else "prefill"
        self._queued[request_id] = (pool, len(prompt_token_ids))
        self._queued_tokens[pool] += len(prompt_token_ids)
        # Approximate mode: record where the prompt's blocks now live. Events mode: refresh
        # their recency in the index (the engines' events add and remove the blocks).
        if decision.prefill_replica_id is not None:
            self._view.index.on_routed(decision.prefill_replica_id, summary.block_hashes)
        self._view.index.on_routed(decision.decode_replica_id, summary.block_hashes)
        return decision

    def estimate_prefill_s(self, prompt_token_ids: list[int]) -> float:
        """Predicted prefill seconds of a prompt before it is placed (cost model), its
        cached prefix taken as the longest any replica holds (none before the view is
        ready). What the prefill tier's fair queue charges a request."""
        n = len(prompt_token_ids)
        cost = self._policy.config.cost_model
        block_size = self._view.block_size_tokens
        if not self._view.ready or block_size <= 0:
            return cost.est_prefill_s(n, 0)
        depths = self._view.index.prefix_depths(block_hashes(prompt_token_ids, block_size))
        cached = min(n - 1, int(depths.max()) * block_size) if len(depths) and n else 0
        return cost.est_prefill_s(n - cached, cached)

    def prefilling_replicas(self) -> int:
        """Healthy replicas that prefill prompts (the prefill pool; decode when aggregated)."""
        self._view.refresh(self._clock())
        return self._view.healthy_count("decode" if self._aggregated else "prefill")

    def decode_replicas(self) -> int:
        """Healthy decode replicas."""
        self._view.refresh(self._clock())
        return self._view.healthy_count("decode")

    def _admit(self, decision: Decision) -> None:
        """Raise AdmissionRejected (429) when a chosen replica is past its bound."""
        limits = self._admission
        d = decision.decode_replica_id
        check_decode_streams(d, self._streams.get(d), limits.max_decode_streams)
        # The predicted wait where the prompt prefills (the prefill replica, or decode for a
        # local prefill): the engine's own queue from every router, or this router's own
        # in-flight work when that is fresher.
        prefilling = decision.prefill_replica_id or d
        check_prefill_backlog(
            prefilling,
            decision.predicted_wait_s,
            decision.est_prefill_s,
            limits.max_prefill_backlog_seconds,
        )

    def decode_done(self, request_id: str) -> None:
        """Call when the request's decode stream ended (or it never got to decode). Idempotent."""
        d = self._stream_of.pop(request_id, None)
        if d is not None:
            self._streams.add(d, -1)

    def open_streams(self, decode_replica_id: str) -> int:
        """Decode streams this router has open on that replica."""
        return self._streams.get(decode_replica_id)

    def other_replica(self, pool: PoolName, failed: str | None) -> str | None:
        """The least-loaded healthy replica of `pool` other than `failed` (for a retry), or
        None when there is none. Load: this router's outstanding prefill work (prefill) or
        open streams (decode), then the engine's running + waiting requests."""
        self._view.refresh(self._clock())
        others = [s for s in self._view.snapshots(pool) if s.healthy and s.replica_id != failed]
        if not others:
            return None

        def load(s: ReplicaSnapshot) -> tuple[float, int, str]:
            mine = (
                self._work.outstanding_s(s.replica_id)
                if pool == "prefill"
                else float(self._streams.get(s.replica_id))
            )
            return mine, s.num_waiting_requests + s.num_running_requests, s.replica_id

        return min(others, key=load).replica_id

    def is_healthy(self, pool: PoolName, replica_id: str) -> bool:
        """Whether `replica_id` is in `pool` and reports routing stats (its engine is alive
        and answering)."""
        self._view.refresh(self._clock())
        return any(s.replica_id == replica_id and s.healthy for s in self._view.snapshots(pool))

    def decode_moved(self, request_id: str, decode_replica_id: str) -> None:
        """The request's decode now streams from `decode_replica_id` (a retry after its first
        decode replica failed, whose stream `decode_done` already closed)."""
        self.decode_done(request_id)
        self._streams.add(decode_replica_id, 1)
        self._stream_of[request_id] = decode_replica_id

    def prefill_done(
        self, decision: Decision | None, request_id: str, measured_s: float | None = None
    ) -> None:
        """Call once when the request's prefill finished or failed (remote: the prefill call
        returned; local: the decode replica produced its first token or failed).
        `measured_s`: the engine's prefill seconds (scheduled → first token), when known: the
        policy's measured pace learns from it."""
        if decision is not None:
            prefilling = decision.prefill_replica_id or decision.decode_replica_id
            self._work.finish(prefilling, request_id)
            if measured_s is not None:
                self._policy.observe_prefill(decision, measured_s)
        queued = self._queued.pop(request_id, None)
        if queued is not None:
            self._queued_tokens[queued[0]] -= queued[1]

    def queued_prefill_tokens(self, pool: PoolName) -> int:
        """Prompt tokens this router has sent to `pool` whose prefill has not finished."""
        return self._queued_tokens.get(pool, 0)
