"""The discrete-event loop: router (pdserve's own RoutingPolicy), pools of simulated engines,
KV transfers and the client, on one virtual clock (pure: no I/O, no wall-clock time).

Who calls it: `pdserve tune` and the validation, once per (layout, workload):
`Simulation(layout, profile).run(requests)`. 10,000 requests take a few seconds.

A request's path, mirroring pdserve's:
1. sent (at its arrival, or when the client's concurrency cap frees a slot);
2. `router_time_s` later the policy decides on exact snapshots of every engine (running, waiting,
   queued prefill tokens, KV usage) and the shared prefix index (engines add a prompt's blocks
   when they finish computing it, as vLLM's KV events do);
3. remote prefill: one hop to the prefill engine, its prompt in chunks, one hop back and one
   to the decode engine, the KV transfer (`kv_transfer_s`; on CPU without NIXL's progress
   thread it starts only between the prefill engine's steps), then the decode engine's first
   step yields the first token. Local prefill (and every request when aggregated): one hop to
   the decode engine, whose replica takes the prompt in first (`local_intake_per_token_s` per
   token, one prompt at a time per replica), and the engine computes the prompt itself;
4. tokens are coalesced like the decode replica's stream (`stream_batch_interval_s`: the
   first and last at once, otherwise at most one chunk per interval); each chunk reaches the
   client one hop (drawn on its own) after it left the engine, plus the request's time
   outside the router (`client_time_s`, spread by `client_jitter_sigma`, drawn once per
   request), never before the chunk ahead of it.
On CPU machines (`SimProfile.host_cores`) the remote-prefill path's hops stretch with the
host cores busy with engines (in a step, or with requests waiting for one) and spread
log-normally (`host_contention`, `serving_jitter_sigma`; the KV transfer spreads too, but
only waits for the prefill engine's step, it does not stretch); the decode path's hops spread
too (`decode_jitter_sigma`; `local_jitter_sigma` for the hops before a local prefill's first
token, whose median is `SimProfile.loaded_local_hop_s`: the idle local hop times
`local_hop_load_factor`); all fitted from a measured run's timeline. Every engine step takes
`engine_step_extra_s` on top of the cost model's time (the run's loaded step time; the prompt
tokens a step computes take `prefill_step_factor` times their per-token and attention terms
first, the step's fixed costs and decoding sequences as idle; a prompt prefilled on the engine
that decodes it pays `SimProfile.loaded_prompt_fixed_s`, its idle fixed cost times
`local_prefill_load_factor`), and then runs at the host's speed of its 50 ms window
(`step_speed_sigma`) and of the whole run (`speed_factor`, on serving-layer times too;
sim/host_speed.py). The serving layer takes each prompt in (`SimProfile.intake_s`, spread per
prompt with a kept mean, first in first out, sim/intake.py): a first chunk that reaches the
router while it takes in other requests' prompts waits for the end of that stretch, so the
short requests a burst of long prompts lands on are slow, as measured.
The router places with its configured cost model (`router.routing.cost_model` in the layout's
policy), as the deployment's router does, not with the profile's engine times: with the
default cost model a burst of long prompts spills one to the decode engine, as measured.
Engines that share a device group (e.g. two engines pinned to one core) split it: a step
started while k of them are busy takes k times its modelled time.
Host-wide stalls (`host_stall_rate_per_s`, a Poisson process of log-normal lengths) stop
everything the deployment is doing at once: every pending event but the client's scheduled
sends moves a stall later (engine steps, hops, KV transfers, a closed-loop client's next
send). The chunk times of a stream are fixed when its last token is produced, so a stall after
that does not move them.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import random
from collections.abc import Callable, Sequence

from pdserve.names import PolicyName, PoolName
from pdserve.router.policy import ReplicaSnapshot, RequestSummary
from pdserve.router.policy.pipeline import RoutingPolicy
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.policy.state import OutstandingWork, with_open_streams
from pdserve.sim.engine import Seq, SimEngine, Step
from pdserve.sim.host_speed import WindowSpeed
from pdserve.sim.intake import Intake, ReplicaIntake
from pdserve.sim.layout import SimLayout
from pdserve.sim.outcome import SimOutcome, SimResult
from pdserve.sim.profile import SimProfile
from pdserve.sim.stream import coalesce_times
from pdserve.sim.workload import SimRequest


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
        count_open_streams: bool = True,
        speed_factor: float = 1.0,
    ):
        """`concurrency`: the client's cap on requests in flight (None = no cap). `seed`: the
        random draws of the serving-layer jitter and of the host's stalls (the only randomness;
        same seed, same run). `count_open_streams` False: the router before 2026-12-03, which
        placed decode on the engines' request counts alone, so a burst went to one decode
        replica (the recorded runs A-H of bench/RESULTS.md were measured with it).
        `speed_factor`: the host's speed over this whole run, multiplying every engine step and
        serving-layer time (the router's, hops, KV transfers, the client's, the intake; 2 =
        twice as slow; `predict` draws one per pooled run from `round_speed_sigma`)."""
        if speed_factor <= 0:
            raise ValueError(f"speed_factor must be > 0, got {speed_factor}")
        self._speed_factor = speed_factor
        self._rng = random.Random(seed)
        self._stall_rng = random.Random(f"host-stalls-{seed}")
        self._window_speed = WindowSpeed(
            profile.step_speed_sigma, random.Random(f"step-speed-{seed}")
        )
        self._layout = layout
        self._profile = profile
        self._concurrency = concurrency
        cost = profile.cost_model
        # The router decides with its configured cost model (router.routing.cost_model), as
        # the deployment's router does; the engines take the profile's times.
        self._policy = RoutingPolicy(
            layout.policy,
            policy=policy,
            aggregated=layout.aggregated,
        )
        self._index = PrefixIndex(mode="events")
        self._work = OutstandingWork()
        self._count_open_streams = count_open_streams
        self._replica_intake = ReplicaIntake()
        self._open_streams: dict[str, int] = {}
        """Streams the router has open per decode engine, from placement until it sees the
        last chunk: the router counts them under the engines' request counts, which it reads
        lagging (`with_open_streams`); the simulator's snapshots are exact but miss requests
        still on their way to the engine, so a burst would otherwise go to one engine."""
        self._engines: dict[str, SimEngine] = {}
        self._pool_of: dict[str, PoolName] = {}
        self._group_of: dict[str, str] = {}
        for spec in layout.engines:
            own = None if spec.pool == "prefill" else profile.loaded_prompt_fixed_s()
            self._engines[spec.engine_id] = SimEngine(
                spec.engine_id, spec.limits, cost, prompt_fixed_s=own
            )
            self._pool_of[spec.engine_id] = spec.pool
            self._group_of[spec.engine_id] = spec.device_group
            self._index.set_capacity(
                spec.engine_id, spec.limits.kv_capacity_tokens // spec.limits.block_size_tokens
            )
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        """(time, tie-breaker, action) of the work in progress: it moves with a host stall."""
        self._fixed: list[tuple[float, int, Callable[[], None]]] = []
        """The events that do not move with a host stall: the client's scheduled sends and the
        next stall (a heap of their own, so a stall moves only the work in flight)."""
        self._seq = itertools.count()
        self._now = 0.0
        self._in_flight = 0
        self._backlog: list[SimRequest] = []
        self._results: dict[str, SimResult] = {}
        self._steps: dict[str, Step] = {}
        self._seq_of: dict[int, SimResult] = {}
        self._intake = Intake()
        self._step_end: dict[str, float] = {}
        self.busy_samples: list[int] = []
        """Busy device groups at each serving-layer delay (for fitting host contention)."""

    # ---- event loop ----

    def _at(self, t: float, action: Callable[[], None], *, fixed: bool = False) -> None:
        heapq.heappush(self._fixed if fixed else self._events, (t, next(self._seq), action))

    def _pop(self) -> tuple[float, int, Callable[[], None]]:
        """The next event of either heap (time, then the order they were scheduled in)."""
        if self._fixed and (not self._events or self._fixed[0][:2] < self._events[0][:2]):
            return heapq.heappop(self._fixed)
        return heapq.heappop(self._events)

    def run(self, requests: Sequence[SimRequest]) -> SimOutcome:
        """Replay `requests` to the end; every request completes (no failures are modelled)."""
        order = {r.request_id: i for i, r in enumerate(requests)}
        closed = [r for r in requests if r.arrival_s is None]
        for r in requests:
            if r.arrival_s is not None:
                self._at(r.arrival_s, functools.partial(self._arrive, r), fixed=True)
        self._backlog = closed
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
        """Schedule the next host-wide stall (none when the profile has no stalls)."""
        rate = self._profile.host_stall_rate_per_s
        if rate > 0 and self._profile.host_stall_median_s > 0:
            gap_s = self._stall_rng.expovariate(rate)
            self._at(self._now + gap_s, self._stall, fixed=True)

    def _stall(self) -> None:
        """A host-wide stall starts now: everything pending but the client's scheduled sends
        (and the next stall) moves by its length. The next stall is drawn while anything is
        left to do, so the run still ends."""
        p = self._profile
        length_s = p.host_stall_median_s * math.exp(self._stall_rng.gauss(0.0, p.host_stall_sigma))
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
        router_s = self._profile.router_time_s(request.prompt_tokens) * self._speed_factor
        self._intake.take_in(request.request_id, self._now, self._intake_s(request.prompt_tokens))
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
        d = self._policy.decide(
            summary,
            self._snapshots("prefill"),
            with_open_streams(self._snapshots("decode"), self._open_streams)
            if self._count_open_streams
            else self._snapshots("decode"),
            self._index,
            self._work,
            self._now,
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
            hop = self._serving(self._profile.hop_s)
        else:
            # The replica takes the prompt in first, one at a time (sim/intake.py).
            per_token_s = self._profile.local_intake_per_token_s * self._speed_factor
            hop = self._decode_hop(local=True) + self._replica_intake.take_in(
                d.decode_replica_id, self._now, per_token_s * request.prompt_tokens
            )
        result.stages["router_queue"] = self._now - result.sent_s
        seq = Seq(
            request_id=request.request_id,
            prompt_tokens=request.prompt_tokens,
            output_tokens=1 if d.prefill_replica_id else request.output_tokens,
            priority=d.engine_priority,
            block_hashes=request.block_hashes,
            prefill_only=d.prefill_replica_id is not None,
        )
        self._seq_of[id(seq)] = result
        self._at(self._now + hop, lambda: self._submit(prefilling, seq))

    def _handoff(self, prefill_seq: Seq) -> None:
        """A remote prefill finished: reply to the router, decode request, KV pull."""
        result = self._seq_of.pop(id(prefill_seq))
        d = result.decision
        if d is None or d.prefill_replica_id is None:
            raise RuntimeError(f"{prefill_seq.request_id}: a handoff without a remote prefill")
        request = result.request
        self._work.finish(d.prefill_replica_id, request.request_id)
        result.cached_tokens = prefill_seq.cached_tokens
        p = self._profile
        seq = Seq(
            request_id=request.request_id,
            prompt_tokens=request.prompt_tokens,
            output_tokens=request.output_tokens,
            priority=d.engine_priority,
            block_hashes=request.block_hashes,
            computed=request.prompt_tokens,
        )
        self._seq_of[id(seq)] = result
        result.handoff_s = self._serving(2 * p.hop_s)  # reply to the router, call to decode
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
        pull_at = self._now + result.handoff_s
        prefill_id = d.prefill_replica_id
        self._at(pull_at, lambda: self._pull(prefill_id, d.decode_replica_id, seq))

    def _pull(self, prefill_id: str, decode_id: str, seq: Seq) -> None:
        """The decode engine pulls the KV; on CPU without NIXL's progress thread the pull
        waits for the prefill engine to finish the step it is in."""
        if self._layout.kv_pull_between_prefill_steps and self._engines[prefill_id].busy:
            end = self._step_end.get(prefill_id, self._now)
            if end > self._now:
                self._at(end, lambda: self._pull(prefill_id, decode_id, seq))
                return
        # The transfer itself does not stretch with busy cores (measured: its median stays
        # near the idle one once the wait for the step is taken out); it does spread.
        transfer = self._jitter(self._profile.kv_transfer_s(seq.prompt_tokens))
        self._at(self._now + transfer, lambda: self._submit(decode_id, seq, transferred=True))

    def _finished(self, seq: Seq) -> None:
        """The decode engine produced a request's last token: the client's view."""
        result = self._seq_of.pop(id(seq))
        client_s = self._spread(
            self._profile.client_time_s(result.request.prompt_tokens),
            self._profile.client_jitter_sigma,
        )
        chunks: list[float] = []
        for t in coalesce_times(seq.token_times_s, self._layout.stream_batch_interval_s):
            # The local spread is a local prefill's: its first token's; later chunks stream
            # like any other request's.
            local = result.local_prefill and not chunks
            at_router = t + self._decode_hop(local=local)
            if not chunks:  # the first chunk waits out the intake of others' prompts
                at_router = self._intake.passes_at(result.request.request_id, at_router)
            arrive = at_router + client_s
            chunks.append(max(arrive, chunks[-1]) if chunks else arrive)
        self._decode_stages(result, seq, chunks[0] - client_s, chunks[-1] - client_s)
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

    @staticmethod
    def _decode_stages(result: SimResult, seq: Seq, first_s: float, last_s: float) -> None:
        """The decode side's stages, given when the first and last chunk reached the router:
        the decode engine's wait (for the KV, or in its queue), its work to the first token,
        and the hops that remain of the window (the handoff's second half; the dispatch hop of
        a local prefill)."""
        first_token_s = seq.token_times_s[0]
        scheduled_s = seq.scheduled_s if seq.scheduled_s is not None else first_token_s
        remote = result.decision is not None and result.decision.prefill_replica_id is not None
        accepted_s = result.handoff_at_s + result.handoff_s if remote else seq.queued_s
        accepted_s = scheduled_s if accepted_s is None else accepted_s
        window_start_s = (
            result.handoff_at_s + result.handoff_s / 2
            if remote
            else result.sent_s + result.stages["router_queue"]
        )
        result.stages["kv_transfer"] = scheduled_s - accepted_s
        result.stages["decode_first_token"] = first_token_s - scheduled_s
        result.stages["decode_hops"] = (first_s - window_start_s) - (first_token_s - accepted_s)
        result.stages["decode"] = last_s - first_s

    def _client_done(self) -> None:
        """The client got a stream's end: a closed loop sends its next request."""
        self._in_flight -= 1
        self._fill()

    def _decode_hop(self, *, local: bool) -> float:
        """One hop of the decode path (to the decode replica, or a stream chunk back) of a
        request that prefills on its decode engine (`local`: up to its first token, the
        profile's loaded local hop) or was prefilled remotely."""
        p = self._profile
        sigma = p.local_jitter_sigma if local and p.local_jitter_sigma is not None else None
        sigma = p.decode_jitter_sigma if sigma is None else sigma
        hop_s = p.loaded_local_hop_s() if local else p.hop_s
        return self._spread(hop_s, sigma)

    def _serving(self, base_s: float) -> float:
        """Ray Serve hops of the remote-prefill path (the prefill call, the handoff) now:
        longer while engines occupy the host's cores (a core counts while its engine is in a
        step or has requests waiting for one: an engine that just ended a step with prompts
        queued computes again at once), and spread by the jitter. (On this path the measured
        hops grow 5-10x under load; a local prefill's barely move.)"""
        busy_groups = {
            self._group_of[eid] for eid, e in self._engines.items() if e.busy or e.has_work
        }
        self.busy_samples.append(len(busy_groups))
        return self._jitter(self._profile.serving_s(base_s, len(busy_groups)))

    def _intake_s(self, num_prompt_tokens: int) -> float:
        """The serving layer's work of taking in one prompt (`SimProfile.intake_s`), spread
        per prompt as the time outside the router is (`client_jitter_sigma`: the intake is the
        per-token part of the router's and the client's times), scaled to keep its mean. The
        short requests a burst lands on are held unevenly, as measured (bench/RESULTS.md, run
        R: 3-152 ms over the 32 sent less than 10 ms before a burst, whose mean intake the
        fit puts at 65 ms), and the work taken in over a run stays the fitted one."""
        sigma = self._profile.client_jitter_sigma
        spread_s = self._spread(self._profile.intake_s(num_prompt_tokens), sigma)
        return spread_s * math.exp(-sigma * sigma / 2)

    def _jitter(self, seconds: float) -> float:
        """`seconds` spread by the remote-prefill path's log-normal jitter."""
        return self._spread(seconds, self._profile.serving_jitter_sigma)

    def _spread(self, seconds: float, sigma: float) -> float:
        """`seconds` times a log-normal factor of median 1 and `sigma` (0: exact), at this
        run's speed (`speed_factor`)."""
        seconds *= self._speed_factor
        return seconds * math.exp(self._rng.gauss(0.0, sigma)) if sigma > 0 else seconds

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
        slower_s = step.prompt_tokens_s * (self._profile.prefill_step_factor - 1)
        seconds = step.duration_s + slower_s + self._profile.engine_step_extra_s
        seconds *= self._window_speed.factor(self._now) * self._speed_factor
        end = self._now + seconds * (1 + sharing)
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
                result.cached_tokens = seq.cached_tokens
        for seq in done:
            if seq.prefill_only:
                self._handoff(seq)
            else:
                self._finished(seq)
        self._start_step(engine_id)
