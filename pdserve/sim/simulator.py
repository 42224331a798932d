"""The discrete-event loop: router (pdserve's own RoutingPolicy), pools of simulated engines,
KV transfers and the client, on one virtual clock (pure: no I/O, no wall-clock time).

Who calls it: `predict` (and through it `pdserve simulate`, `tune`, `sim-check` and the fit),
once per (layout, workload, seed): `Simulation(layout, profile).run(requests)`. 10,000
requests take a few seconds.

A request's path, mirroring pdserve's:
1. sent (at its arrival, or when the client's concurrency cap frees a slot);
2. `router_time_s` later the policy decides on exact snapshots of every engine (running,
   waiting, queued prefill tokens, KV usage) and the shared prefix index (engines add a
   prompt's blocks when they finish computing it, as vLLM's KV events do), with the router's
   own open streams per decode engine counted under them, as the router does. It costs
   prompts with the layout's `router.routing.cost_model`, as the deployed router does, not
   with the profile's engine times;
3. remote prefill: one hop to the prefill engine, its prompt in chunks, one hop back and one
   to the decode engine, the KV transfer (on CPU without NIXL's progress thread it starts
   only between the prefill engine's steps), then the decode engine's first step yields the
   first token. Local prefill (and every request when aggregated): one hop to the decode
   engine, which computes the prompt itself (on a disaggregated deployment with the ITL guard
   on, in chunks sized each step by its streams' ITL budget, as the deployed decode engines
   do: engine.py);
4. tokens are coalesced like the decode replica's stream (`stream_batch_interval_s`); each
   chunk reaches the client one hop after it left the engine, never before the chunk ahead.
Engines that share a device group (two engines pinned to one core) split it: a step started
while k of them are busy takes k times its modelled time.

A shared CPU host (the profile's `cpu_host` block, applied by host.py) adds: hops that stretch
with the busy cores and spread, slower and spread engine steps, the serving layer's intake of
each prompt holding up other requests' first chunks (intake.py), a decode replica taking its
local prompts in one at a time, and host-wide stalls that move every pending event but the
client's scheduled sends. Without the block none of this happens and the run is exact.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Callable, Sequence

from pdserve.itl_budget import ItlSettings
from pdserve.names import PolicyName, PoolName
from pdserve.router.policy import Decision, ReplicaSnapshot, RequestSummary
from pdserve.router.policy.pipeline import RoutingPolicy
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.policy.state import OutstandingWork, with_open_streams
from pdserve.sim.engine import Seq, SimEngine, Step
from pdserve.sim.host import HostEffects
from pdserve.sim.intake import Intake, ReplicaIntake
from pdserve.sim.layout import SimLayout
from pdserve.sim.outcome import SimOutcome, SimResult, decode_stages
from pdserve.sim.profile import SimProfile
from pdserve.sim.stream import coalesce_times
from pdserve.sim.workload import SimRequest

Action = Callable[[], None]


def decode_itl_budget(layout: SimLayout) -> ItlSettings | None:
    """The decode engines' ITL budget, the settings pdserve.engine.args gives the deployed
    ones: disaggregated layouts with router.routing.itl_slo_s set (the router's cost model
    sizes the chunks); None otherwise (aggregated engines keep their configured chunks)."""
    policy = layout.policy
    if layout.aggregated or policy.itl_slo_s is None:
        return None
    cost = policy.cost_model
    return ItlSettings(
        itl_slo_s=policy.itl_slo_s,
        min_chunk_tokens=policy.min_prefill_chunk_tokens,
        per_token_s=cost.per_token_s,
        per_token_sq_s=cost.per_token_sq_s,
        decode_base_s=cost.decode_base_s,
        decode_per_seq_s=cost.decode_per_seq_s,
        decode_per_context_token_s=cost.decode_per_context_token_s,
    )


class Simulation:
    """One deployment under one workload. Build, call `run` once."""

    def __init__(
        self,
        layout: SimLayout,
        profile: SimProfile,
        *,
        concurrency: int | None = None,
        policy: PolicyName = "pdserve",
        seed: int = 0,
        speed_factor: float = 1.0,
    ):
        """`concurrency`: the client's cap on requests in flight (None = no cap). `seed`: the
        host's random draws (the only randomness; none without a `cpu_host` block).
        `speed_factor`: the host's speed over this whole run, on every engine step and
        serving-layer time (2 = twice as slow; `predict` gives each pooled run its own)."""
        self._host = HostEffects(profile.host, seed=seed, speed_factor=speed_factor)
        self._layout = layout
        self._profile = profile
        self._concurrency = concurrency
        self._policy = RoutingPolicy(layout.policy, policy=policy, aggregated=layout.aggregated)
        self._index = PrefixIndex(mode="events")
        self._work = OutstandingWork()
        self._replica_intake = ReplicaIntake()
        self._intake = Intake()
        self._open_streams: dict[str, int] = {}
        """Streams the router has open per decode engine, from placement until it sees the
        last chunk (the snapshots are exact but miss requests still on their way)."""
        self._engines: dict[str, SimEngine] = {}
        self._pool_of: dict[str, PoolName] = {}
        self._group_of: dict[str, str] = {}
        itl = decode_itl_budget(layout)
        for spec in layout.engines:
            own = None if spec.pool == "prefill" else profile.loaded_prompt_fixed_s()
            self._engines[spec.engine_id] = SimEngine(
                spec.engine_id,
                spec.limits,
                profile.cost_model,
                prompt_fixed_s=own,
                itl=itl if spec.pool == "decode" else None,
            )
            self._pool_of[spec.engine_id] = spec.pool
            self._group_of[spec.engine_id] = spec.device_group
            self._index.set_capacity(
                spec.engine_id, spec.limits.kv_capacity_tokens // spec.limits.block_size_tokens
            )
        self._events: list[tuple[float, int, Action]] = []
        """(time, tie-breaker, action) of the work in progress: it moves with a host stall."""
        self._fixed: list[tuple[float, int, Action]] = []
        """Events that do not move with a stall: the client's scheduled sends, the next stall."""
        self._seq = itertools.count()
        self._now = 0.0
        self._in_flight = 0
        self._backlog: list[SimRequest] = []
        self._results: dict[str, SimResult] = {}
        self._steps: dict[str, Step] = {}
        self._seq_of: dict[int, SimResult] = {}
        self._step_end: dict[str, float] = {}
        self.busy_samples: list[int] = []
        """Busy device groups at each remote-path hop (what the host contention is fitted
        against)."""

    # ---- event loop ----

    def _at(self, t: float, action: Action, *, fixed: bool = False) -> None:
        heapq.heappush(self._fixed if fixed else self._events, (t, next(self._seq), action))

    def _pop(self) -> tuple[float, int, Action]:
        """The next event of either heap (time, then the order they were scheduled in)."""
        if self._fixed and (not self._events or self._fixed[0][:2] < self._events[0][:2]):
            return heapq.heappop(self._fixed)
        return heapq.heappop(self._events)

    def run(self, requests: Sequence[SimRequest]) -> SimOutcome:
        """Replay `requests` to the end; every request completes (no failures are modelled).
        Results come back in request order."""
        order = {r.request_id: i for i, r in enumerate(requests)}
        if len(order) != len(requests):
            raise ValueError("request ids must be unique")
        for r in requests:
            if r.arrival_s is not None:
                self._at(r.arrival_s, functools.partial(self._arrive, r), fixed=True)
        self._backlog = [r for r in requests if r.arrival_s is None]
        self._fill()
        self._next_stall()
        while self._events or self._fixed:
            t, _, action = self._pop()
            self._now = t
            action()
        results = sorted(self._results.values(), key=lambda x: order[x.request.request_id])
        first = min((x.sent_s for x in results), default=0.0)
        last = max((x.sent_s + (x.e2e_s or 0.0) for x in results), default=0.0)
        return SimOutcome(results=results, wall_s=last - first)

    def _next_stall(self) -> None:
        gap_s = self._host.next_stall_gap_s()
        if gap_s is not None:
            self._at(self._now + gap_s, self._stall, fixed=True)

    def _stall(self) -> None:
        """A host-wide stall starts now: everything pending but the client's scheduled sends
        (and the next stall) moves by its length. The next stall is drawn while anything is
        left to do, so the run still ends."""
        length_s = self._host.stall_length_s()
        # The same length added to every time keeps the heap a heap.
        self._events = [(t + length_s, n, action) for t, n, action in self._events]
        for engine_id, end_s in self._step_end.items():
            if end_s >= self._now:
                self._step_end[engine_id] = end_s + length_s
        if self._events or self._fixed:
            self._next_stall()

    def _arrive(self, request: SimRequest) -> None:
        self._backlog.append(request)
        self._fill()

    def _fill(self) -> None:
        cap = self._concurrency
        while self._backlog and (cap is None or self._in_flight < cap):
            self._send(self._backlog.pop(0))

    # ---- router ----

    def _send(self, request: SimRequest) -> None:
        self._in_flight += 1
        self._results[request.request_id] = SimResult(request=request, sent_s=self._now)
        router_s = self._host.router_s(self._profile.router_time_s(request.prompt_tokens))
        self._intake.take_in(
            request.request_id, self._now, self._host.intake_s(request.prompt_tokens)
        )
        self._at(self._now + router_s, lambda: self._place(request))

    def _snapshots(self, pool: PoolName) -> list[ReplicaSnapshot]:
        snaps = []
        for eid, engine in self._engines.items():
            if self._pool_of[eid] != pool:
                continue
            tokens, prompts = engine.queued_prefill_tokens()
            snaps.append(
                ReplicaSnapshot(
                    replica_id=eid,
                    pool=pool,
                    num_running_requests=len(engine.running),
                    num_waiting_requests=len(engine.waiting),
                    kv_cache_usage=engine.kv_usage(),
                    queued_prefill_tokens=tokens,
                    num_queued_prefills=prompts,
                )
            )
        return snaps

    def _place(self, request: SimRequest) -> None:
        result = self._results[request.request_id]
        summary = RequestSummary(
            request_id=request.request_id,
            num_prompt_tokens=request.prompt_tokens,
            block_hashes=request.block_hashes,
            client_priority=request.priority,
            arrival_time_s=self._now,
        )
        decode = with_open_streams(self._snapshots("decode"), self._open_streams)
        d = self._policy.decide(
            summary, self._snapshots("prefill"), decode, self._index, self._work, self._now
        )
        result.decision = d
        self._open_streams[d.decode_replica_id] = self._open_streams.get(d.decode_replica_id, 0) + 1
        result.local_prefill = d.prefill_is_local
        prefilling = d.prefill_replica_id or d.decode_replica_id
        self._work.start(
            prefilling, request.request_id, d.est_prefill_s, d.engine_priority, self._now
        )
        remote = d.prefill_replica_id is not None
        if remote:
            hop = self._remote_path_s(self._profile.hop_s)
        else:
            # The replica takes the prompt in first, one at a time (sim/intake.py).
            work_s = self._host.local_intake_s(request.prompt_tokens)
            hop = self._host.decode_hop_s(self._profile.loaded_local_hop_s(), local=True)
            hop += self._replica_intake.take_in(d.decode_replica_id, self._now, work_s)
        result.stages["router_queue"] = self._now - result.sent_s
        seq = Seq(
            request_id=request.request_id,
            prompt_tokens=request.prompt_tokens,
            output_tokens=1 if remote else request.output_tokens,
            priority=d.engine_priority,
            block_hashes=request.block_hashes,
            prefill_only=remote,
        )
        self._seq_of[id(seq)] = result
        self._at(self._now + hop, lambda: self._submit(prefilling, seq))

    def _observe_prefill(self, decision: Decision, seq: Seq) -> None:
        """The router's measured pace learns from the prefill just done (scheduled → now, as
        the engines report it)."""
        if seq.scheduled_s is not None:
            self._policy.observe_prefill(decision, self._now - seq.scheduled_s)

    def _handoff(self, prefill_seq: Seq) -> None:
        """A remote prefill finished: reply to the router, decode request, KV pull."""
        result = self._seq_of.pop(id(prefill_seq))
        d = result.decision
        if d is None or d.prefill_replica_id is None:
            raise RuntimeError(f"{prefill_seq.request_id}: a handoff without a remote prefill")
        request = result.request
        self._work.finish(d.prefill_replica_id, request.request_id)
        self._observe_prefill(d, prefill_seq)
        result.cached_tokens = prefill_seq.cached_tokens
        seq = Seq(
            request_id=request.request_id,
            prompt_tokens=request.prompt_tokens,
            output_tokens=request.output_tokens,
            priority=d.engine_priority,
            block_hashes=request.block_hashes,
            computed=request.prompt_tokens,
        )
        self._seq_of[id(seq)] = result
        # The reply to the router and the call to the decode replica.
        result.handoff_s = self._remote_path_s(2 * self._profile.hop_s)
        result.handoff_at_s = self._now
        # As the router splits its window with vLLM's timestamps: the wait for the step in
        # progress when the prompt arrived counts as hops, not as queue.
        queued_s = prefill_seq.queued_s if prefill_seq.queued_s is not None else self._now
        scheduled_s = prefill_seq.scheduled_s if prefill_seq.scheduled_s is not None else queued_s
        result.stages["prefill_queue"] = scheduled_s - queued_s
        result.stages["prefill"] = self._now - scheduled_s
        window_s = (
            self._now + result.handoff_s / 2 - (result.sent_s + result.stages["router_queue"])
        )
        result.stages["prefill_hops"] = window_s - (self._now - queued_s)
        prefill_id = d.prefill_replica_id
        pull_at = self._now + result.handoff_s
        self._at(pull_at, lambda: self._pull(prefill_id, d.decode_replica_id, seq))

    def _pull(self, prefill_id: str, decode_id: str, seq: Seq) -> None:
        """The decode engine pulls the KV; on CPU without NIXL's progress thread the pull
        waits for the prefill engine to finish the step it is in."""
        if self._layout.kv_pull_between_prefill_steps and self._engines[prefill_id].busy:
            end = self._step_end.get(prefill_id, self._now)
            if end > self._now:
                self._at(end, lambda: self._pull(prefill_id, decode_id, seq))
                return
        transfer = self._host.kv_transfer_s(self._profile.kv_transfer_s(seq.prompt_tokens))
        self._at(self._now + transfer, lambda: self._submit(decode_id, seq, transferred=True))

    def _finished(self, seq: Seq) -> None:
        """The decode engine produced a request's last token: the client's view."""
        result = self._seq_of.pop(id(seq))
        client_s = self._host.client_s(result.request.prompt_tokens)
        chunks: list[float] = []
        for t in coalesce_times(seq.token_times_s, self._layout.stream_batch_interval_s):
            # A local prefill's own hop is its first token's; later chunks stream like any.
            local = result.local_prefill and not chunks
            hop_s = self._profile.loaded_local_hop_s() if local else self._profile.hop_s
            at_router = t + self._host.decode_hop_s(hop_s, local=local)
            if not chunks:  # the first chunk waits out the intake of others' prompts
                at_router = self._intake.passes_at(result.request.request_id, at_router)
            arrive = at_router + client_s
            chunks.append(max(arrive, chunks[-1]) if chunks else arrive)
        decode_stages(result, seq, chunks[0] - client_s, chunks[-1] - client_s)
        result.ttft_s = chunks[0] - result.sent_s
        result.e2e_s = chunks[-1] - result.sent_s
        result.chunk_gaps_s = tuple(b - a for a, b in itertools.pairwise(chunks))
        decode_id = result.decision.decode_replica_id if result.decision else None
        self._at(chunks[-1] - client_s, lambda: self._stream_closed(decode_id))
        self._at(chunks[-1], self._client_done)

    def _stream_closed(self, decode_replica_id: str | None) -> None:
        """The router saw a stream's last chunk: one open stream fewer on its decode replica."""
        if decode_replica_id is not None:
            self._open_streams[decode_replica_id] -= 1

    def _client_done(self) -> None:
        """The client got a stream's end: a closed loop sends its next request."""
        self._in_flight -= 1
        self._fill()

    def _remote_path_s(self, base_s: float) -> float:
        """Ray Serve hops of the remote-prefill path (the prefill call, the handoff) now,
        with the host cores busy at this moment (a core counts while its engine is in a step
        or has requests waiting: an engine that just ended a step with prompts queued
        computes again at once)."""
        busy_groups = {
            self._group_of[eid] for eid, e in self._engines.items() if e.busy or e.has_work
        }
        self.busy_samples.append(len(busy_groups))
        return self._host.remote_path_s(base_s, len(busy_groups))

    # ---- engines ----

    def _submit(self, engine_id: str, seq: Seq, transferred: bool = False) -> None:
        engine = self._engines[engine_id]
        if transferred:  # the pulled blocks are now in the decode engine's prefix cache
            self._index.add_blocks(engine_id, seq.block_hashes)
        engine.submit(seq)
        if not engine.busy:
            # Start at this instant but after every other arrival of the same instant, so
            # requests that arrive together are scheduled together (as the engine loop does).
            engine.busy = True
            self._at(self._now, lambda: self._start_step(engine_id))

    def _start_step(self, engine_id: str) -> None:
        engine = self._engines[engine_id]
        for seq in engine.waiting:
            if seq.queued_s is None:
                seq.queued_s = self._now
        step = engine.plan(lambda hashes: self._index.num_cached_blocks(engine_id, hashes))
        if step is None:
            engine.busy = False
            return
        group = self._group_of[engine_id]
        sharing = sum(
            1
            for eid, e in self._engines.items()
            if e.busy and eid != engine_id and self._group_of[eid] == group
        )
        engine.busy = True
        for seq, _ in step.work:
            if seq.scheduled_s is None:
                seq.scheduled_s = self._now
        self._steps[engine_id] = step
        end = self._now + self._host.step_s(step, self._now) * (1 + sharing)
        self._step_end[engine_id] = end
        self._at(end, lambda: self._end_step(engine_id))

    def _end_step(self, engine_id: str) -> None:
        engine = self._engines[engine_id]
        step = self._steps.pop(engine_id)
        prefilled, done = engine.finish_step(step, self._now)
        engine.busy = False  # until _start_step below finds more work
        for seq in prefilled:
            self._index.add_blocks(engine_id, seq.block_hashes)
            result = self._seq_of.get(id(seq))
            if result is not None and not seq.prefill_only:  # local prefill: first token now
                self._work.finish(engine_id, seq.request_id)
                if result.decision is not None:
                    self._observe_prefill(result.decision, seq)
                result.cached_tokens = seq.cached_tokens
        for seq in done:
            if seq.prefill_only:
                self._handoff(seq)
            else:
                self._finished(seq)
        self._start_step(engine_id)
