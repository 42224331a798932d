"""One simulated vLLM engine: its scheduler and its step time (pure).

Who calls it: the simulator's event loop (simulator.py) adds sequences with `submit`, asks
for the next step with `plan` when the engine is idle or a step ended, and applies the step
with `finish_step`. A step is planned like vLLM v1's scheduler with chunked prefill: running
sequences first (each decoding one token, or continuing its prompt by at most
`chunk_tokens`), then waiting ones in priority order (lower first, then arrival) while
sequences and the step's token budget last. Its time comes from the cost model (see
`_duration`): one step base, the prefill chunks' per-token and attention terms (a prompt's own
fixed cost with its first chunk) and the decoding sequences' per-sequence and context terms.

On a decode engine of a disaggregated deployment with the ITL guard on (`ItlSettings` of
pdserve.itl_budget, from `router.routing.itl_slo_s`), the per-sequence chunk cap of each step
follows the decode streams' ITL budget instead, as pdserve.engine.itl_scheduler sets vLLM's
long_prefill_token_threshold (see `SimEngine.step_chunk_tokens`): the chunk comes from the
router's cost model (what the deployed engine sizes it with), the step's time still from the
profile's.

One known difference: vLLM lifts the chunk cap while a prompt is the only request on its
engine (it then takes the whole step budget). Modelling that made the predictions of the runs
recorded on 2026-12-04 worse (notes in the git history of bench/RESULTS.md), so the model
keeps the cap.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from pdserve.itl_budget import ItlSettings
from pdserve.itl_budget import chunk_tokens as itl_chunk_tokens
from pdserve.router.policy.cost_model import CostModel


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """The engine's scheduler settings (pdserve's `engine` block)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunk_tokens: int
    """Most prompt tokens one sequence prefills per step (long_prefill_token_threshold)."""
    block_size_tokens: int
    kv_capacity_tokens: int


@dataclass(slots=True)
class Seq:
    """One request on one engine. `prefill_only`: a prefill-pool request, done at the end of
    its prompt (its KV then moves to decode). `computed`: prompt tokens whose KV exists here
    (cached, transferred or computed); `generated`: output tokens produced here."""

    request_id: str
    prompt_tokens: int
    output_tokens: int
    priority: int
    block_hashes: tuple[int, ...]
    prefill_only: bool = False
    computed: int = 0
    generated: int = 0
    order: int = 0
    cached_tokens: int = 0
    """Prompt tokens found in the prefix cache when it was admitted."""
    started: bool = False
    """Its prompt's own computation began (the cost model's fixed overhead is paid then)."""
    token_times_s: list[float] = field(default_factory=list)
    """When each output token was produced (engine time, seconds)."""
    queued_s: float | None = None
    """When the engine's loop first saw it (the simulation's clock): the first step boundary
    after it was submitted (vLLM adds a request to its scheduler between steps, so its queued
    timestamp does not count the wait for the step in progress)."""
    scheduled_s: float | None = None
    """When its first step on this engine started."""
    prefilled_s: float | None = None
    """When the step that completed its prompt ended (None: still prefilling, or its KV was
    transferred)."""

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prompt_tokens


@dataclass(frozen=True, slots=True)
class Step:
    """A planned engine step: (sequence, tokens it computes), its idle duration, and the part
    of that duration its prompt tokens' per-token and attention terms make up (what
    `prefill_step_factor` slows under load; the step's fixed costs and its decoding
    sequences are not in it)."""

    work: tuple[tuple[Seq, int], ...]
    duration_s: float
    prompt_tokens_s: float

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens this step computes (0 for a pure decode step)."""
        return sum(n for seq, n in self.work if seq.prefilling)


CacheLookup = Callable[[tuple[int, ...]], int]
"""Cached full blocks of a prompt's block hashes on this engine (longest cached prefix)."""


class SimEngine:
    """A simulated engine. Not thread-safe; owned by one simulation."""

    def __init__(
        self,
        engine_id: str,
        limits: EngineLimits,
        cost: CostModel,
        *,
        prompt_fixed_s: float | None = None,
        itl: ItlSettings | None = None,
    ):
        """`prompt_fixed_s`: a prompt's fixed cost on this engine (None = the cost model's
        fixed_overhead_s; a decode or aggregated engine's own prompts may cost less than a
        prefill-pool engine's, SimProfile.local_prefill_fixed_s). `itl`: the streams' ITL
        budget that sizes each step's prompt chunks, the decode engine's own settings (a
        decode engine of a disaggregated deployment with router.routing.itl_slo_s set: the
        budget and the router's cost coefficients); None = `limits.chunk_tokens`."""
        self.engine_id = engine_id
        self.limits = limits
        self._cost = cost
        self._prompt_fixed_s = cost.fixed_overhead_s if prompt_fixed_s is None else prompt_fixed_s
        self.itl = itl
        self.waiting: list[Seq] = []
        self.running: list[Seq] = []
        self.busy = False
        self._order = itertools.count()

    def submit(self, seq: Seq) -> None:
        """Queue a sequence (its `computed` already counts KV that arrived by transfer)."""
        seq.order = next(self._order)
        self.waiting.append(seq)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def queued_prefill_tokens(self) -> tuple[int, int]:
        """(uncomputed prompt tokens, prompts) accepted and not yet prefilled."""
        seqs = [s for s in (*self.waiting, *self.running) if s.prefilling]
        return sum(s.prompt_tokens - s.computed for s in seqs), len(seqs)

    def kv_usage(self) -> float:
        used = sum(s.computed + s.generated for s in self.running)
        return min(1.0, used / max(1, self.limits.kv_capacity_tokens))

    def step_chunk_tokens(self) -> int:
        """Most prompt tokens one sequence computes in the next step: `limits.chunk_tokens`,
        or with an ITL budget, while streams decode and prompts wait or are computed, what
        pdserve.engine.itl_scheduler sets before vLLM schedules the step: `chunk_tokens` of
        pdserve.itl_budget (the largest chunk a step of that many streams may
        carry within the budget, after the most prompt tokens computed so far among the
        running prompts) split between the prompts, at least `min_chunk_tokens`, at most
        `limits.chunk_tokens`. Streams: running sequences past their prompt; prompts:
        running and waiting sequences not past it (a decode request whose KV arrived by
        transfer is past it, as vLLM's request waiting for its KV is not counted)."""
        lim = self.limits
        itl = self.itl
        if itl is None:
            return lim.chunk_tokens
        streams = sum(1 for s in self.running if not s.prefilling)
        running_prompts = [s.computed for s in self.running if s.prefilling]
        prompts = len(running_prompts) + sum(1 for s in self.waiting if s.prefilling)
        if not streams or not prompts:
            return lim.chunk_tokens
        allowance = itl_chunk_tokens(
            itl,
            itl.itl_slo_s,
            streams,
            max(running_prompts, default=0),
            lim.max_num_batched_tokens,
        )
        return min(max(itl.min_chunk_tokens, allowance // prompts), lim.chunk_tokens)

    def plan(self, cached_blocks: CacheLookup) -> Step | None:
        """The next step, or None when there is nothing to run. Admits waiting sequences
        (their cached prefix is counted as computed when they are admitted)."""
        lim = self.limits
        chunk = self.step_chunk_tokens()
        budget = lim.max_num_batched_tokens
        work: list[tuple[Seq, int]] = []
        for seq in self.running:
            n = min(seq.prompt_tokens - seq.computed, chunk) if seq.prefilling else 1
            n = min(n, budget)
            if n > 0:
                work.append((seq, n))
                budget -= n
        self.waiting.sort(key=lambda s: (s.priority, s.order))
        while self.waiting and len(self.running) < lim.max_num_seqs and budget > 0:
            seq = self.waiting.pop(0)
            if seq.computed == 0:  # a fresh prompt: reuse its cached prefix (all but 1 token)
                hit = cached_blocks(seq.block_hashes) * lim.block_size_tokens
                seq.computed = seq.cached_tokens = min(hit, seq.prompt_tokens - 1)
            self.running.append(seq)
            n = min(seq.prompt_tokens - seq.computed, chunk) if seq.prefilling else 1
            n = min(n, budget)
            work.append((seq, n))
            budget -= n
        if not work:
            return None
        prompt_s = self._prompt_tokens_s(work)
        return Step(tuple(work), self._duration(work, prompt_s), prompt_s)

    def _prompt_tokens_s(self, work: list[tuple[Seq, int]]) -> float:
        """The chunks' per-token and attention terms of `_duration` (prompt work alone)."""
        cost = self._cost
        return sum(
            cost.per_token_s * n + cost.per_token_sq_s * n * (n / 2 + seq.computed)
            for seq, n in work
            if seq.prefilling
        )

    def _duration(self, work: list[tuple[Seq, int]], prompt_s: float) -> float:
        """Step time: the step's base (decode_base_s) once, each prompt's remaining fixed
        cost (this engine's prompt fixed cost - decode_base_s) with its first chunk, the
        chunks' token and attention terms (`prompt_s`, from `_prompt_tokens_s`), and the
        decoding sequences' per-sequence and context terms. A prompt alone thus costs
        est_prefill_s (with this engine's fixed cost), a decode step alone
        est_decode_step_s."""
        cost = self._cost
        per_prompt_s = max(0.0, self._prompt_fixed_s - cost.decode_base_s)
        seconds = cost.decode_base_s + prompt_s
        seconds += per_prompt_s * sum(1 for seq, _ in work if seq.prefilling and not seq.started)
        decoding = [s for s, _ in work if not s.prefilling]
        if decoding:
            context = sum(s.computed + s.generated for s in decoding)
            seconds += (
                cost.decode_per_seq_s * len(decoding) + cost.decode_per_context_token_s * context
            )
        return seconds

    def finish_step(self, step: Step, now_s: float) -> tuple[list[Seq], list[Seq]]:
        """Apply a step that ended at `now_s`: returns (sequences whose prompt is now fully
        computed, sequences that finished and left the engine)."""
        prefilled: list[Seq] = []
        done: list[Seq] = []
        for seq, n in step.work:
            if seq.prefilling:
                seq.started = True
                seq.computed += n
                if seq.prefilling:
                    continue
                prefilled.append(seq)
                if seq.prefill_only:
                    done.append(seq)
                    continue
            seq.generated += 1  # the step that completes the prompt yields its first token
            seq.token_times_s.append(now_s)
            if seq.generated >= seq.output_tokens:
                done.append(seq)
        if done:
            gone = {id(s) for s in done}
            self.running = [s for s in self.running if id(s) not in gone]
        return prefilled, done
