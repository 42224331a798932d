"""Adapter that runs the phases of one benchmark: warm-up, arrivals, concurrency, progress.

Built by the CLI; `run()` is awaited once, inside `asyncio.run`. A first Ctrl-C makes
`asyncio.run` cancel the main task: the phase in progress cancels its in-flight requests,
keeps what completed, and `run()` returns normally with `interrupted=True` (a second Ctrl-C
raises KeyboardInterrupt). Phases alternate policies A, B, A, B... for `--rounds`; each uses
its own prompt salt, so no phase reuses another's prefix cache.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from rich.progress import Progress, TaskID

from pdserve.bench.agent import advance, start_conversation, step_request
from pdserve.bench.client import BenchClient, BenchError, Clock
from pdserve.bench.config import BenchConfig
from pdserve.bench.mixed import build_mixed
from pdserve.bench.models import (
    ChatMessage,
    PhaseOutcome,
    RequestResult,
    RequestSpec,
    WorkloadPlan,
)
from pdserve.bench.prompts import (
    Calibration,
    Prompt,
    PromptFactory,
    calibration_prompts,
    fit_calibration,
)
from pdserve.bench.synthetic import build_synthetic
from pdserve.bench.trace import TraceRecord, build_trace, load_trace

NUM_ERRORS_PRINTED = 3
WARMUP_MAX_TOKENS = 8


@dataclass
class RunOutcome:
    model: str | None = None
    calibration: Calibration | None = None
    phases: list[PhaseOutcome] = field(default_factory=list)
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class _PhaseState:
    """Mutable bookkeeping of the phase in progress (results so far, in-flight tasks)."""

    task_id: TaskID
    t0: float
    results: list[RequestResult] = field(default_factory=list)
    children: set[asyncio.Task[None]] = field(default_factory=set)
    num_errors: int = 0


class Runner:
    def __init__(
        self,
        cfg: BenchConfig,
        client: BenchClient,
        progress: Progress,
        log: Callable[[str], None],
        clock: Clock,
    ) -> None:
        self._cfg = cfg
        self._client = client
        self._progress = progress
        self._log = log
        self._clock = clock
        self._errors_printed = 0

    async def run(self) -> RunOutcome:
        out = RunOutcome()
        try:
            await self._run(out)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            out.interrupted = True
        return out

    async def _run(self, out: RunOutcome) -> None:
        cfg = self._cfg
        records = self._load_trace() if cfg.workload == "trace" else []
        out.model = cfg.model or await self.default_model()
        if not cfg.token_ids:
            out.calibration = await self.calibrate(out.model)
        calibration = out.calibration or Calibration(tokens_per_word=1.0, overhead_tokens=0.0)
        for round_index in range(cfg.rounds):
            for name in cfg.policy_names:
                factory = PromptFactory(
                    calibration, salt=f"{cfg.seed}:{name}:{round_index}", token_ids=cfg.token_ids
                )
                policy = name if cfg.policies else None
                await self._warmup(factory, out.model, policy)
                plan = self._plan(factory, records)
                if not out.phases:
                    out.notes += _plan_notes(plan, cfg)
                phase = await self._phase(name, round_index, plan, factory, out.model, policy)
                out.phases.append(phase)
                if phase.interrupted:
                    out.interrupted = True
                    return

    def _load_trace(self) -> list[TraceRecord]:
        if self._cfg.trace is None:
            raise BenchError("the trace workload needs --trace PATH")
        try:
            records = load_trace(self._cfg.trace)
        except (OSError, ValueError) as exc:
            raise BenchError(f"cannot read trace {self._cfg.trace}: {exc}") from exc
        if not records:
            raise BenchError(f"trace {self._cfg.trace} has no requests")
        return records

    async def default_model(self) -> str:
        models = await self._client.list_models()
        if not models:
            raise BenchError("the server lists no models; pass --model")
        return models[0]

    async def calibrate(self, model: str) -> Calibration:
        """Fit tokens-per-word on the workload's endpoint from the server's own counts."""
        probe = PromptFactory(Calibration(1.0, 0.0), salt=f"{self._cfg.seed}:calibration")
        points = []
        for n, text in calibration_prompts(probe.tag("calibration")):
            spec = self._spec(text, n, 1)
            r = await self._client.send(spec, model, None, 0.0)
            if not r.ok or r.prompt_tokens is None:
                raise BenchError(f"calibration request failed: {r.error or 'no usage reported'}")
            points.append((n, r.prompt_tokens))
        cal = fit_calibration(points)
        self._log(
            f"calibration: {cal.tokens_per_word:.3f} tokens/word, "
            f"{cal.overhead_tokens:.1f} tokens overhead ({self._endpoint()})"
        )
        return cal

    def _endpoint(self) -> str:
        return "chat" if self._cfg.workload == "agent" else "completions"

    def _probe(
        self, factory: PromptFactory, key: str, num_tokens: int, max_tokens: int
    ) -> RequestSpec:
        """A unique short request on the workload's endpoint (calibration, warm-up)."""
        return self._spec(factory.unique(key, num_tokens), num_tokens, max_tokens)

    def _spec(self, prompt: Prompt, num_tokens: int, max_tokens: int) -> RequestSpec:
        if self._endpoint() == "chat":
            if not isinstance(prompt, str):
                raise BenchError("--token-ids works with completions only")
            msgs = (ChatMessage("user", prompt),)
            return RequestSpec(-1, "probe", max_tokens, num_tokens, messages=msgs)
        return RequestSpec(-1, "probe", max_tokens, num_tokens, prompt=prompt)

    async def _warmup(self, factory: PromptFactory, model: str, policy: str | None) -> None:
        """`warmup` unique requests of each warm-up prompt length (BenchConfig.
        warmup_prompt_tokens), one length after the other, each length's sent at once so they
        spread over the engines (a deployment with two prefill engines warms both)."""
        cfg = self._cfg
        max_tokens = min(cfg.output_tokens, WARMUP_MAX_TOKENS)
        failed: list[str] = []
        for num_tokens in cfg.warmup_prompt_tokens:
            specs = [
                self._probe(factory, f"warmup:{num_tokens}:{i}", num_tokens, max_tokens)
                for i in range(cfg.warmup)
            ]
            results = await asyncio.gather(
                *(self._client.send(spec, model, policy, 0.0) for spec in specs)
            )
            failed += [r.error or "" for r in results if not r.ok]
        if failed:
            total = cfg.num_warmup_requests
            self._log(f"[yellow]warm-up: {len(failed)} of {total} failed: {failed[0]}")

    def _plan(self, factory: PromptFactory, records: list[TraceRecord]) -> WorkloadPlan:
        cfg = self._cfg
        if cfg.workload == "mixed":
            return WorkloadPlan(specs=tuple(build_mixed(cfg, factory)))
        if cfg.workload == "synthetic":
            return build_synthetic(cfg, factory)
        if cfg.workload == "trace":
            return build_trace(records, cfg, factory)
        return WorkloadPlan(specs=())  # agent: requests are built step by step

    async def _phase(
        self, name: str, round_index: int, plan: WorkloadPlan, factory: PromptFactory,
        model: str, policy: str | None,
    ) -> PhaseOutcome:  # fmt: skip
        cfg = self._cfg
        total = cfg.agents * cfg.steps if cfg.workload == "agent" else len(plan.specs)
        label = f"{name} ({round_index + 1}/{cfg.rounds})"
        task_id = self._progress.add_task(label, total=total, errors=0)
        state = _PhaseState(task_id=task_id, t0=self._clock())
        interrupted = False
        try:
            if cfg.workload == "agent":
                await self._agents(state, factory, model, policy)
            else:
                await self._open_loop(state, plan.specs, model, policy)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            interrupted = True
            for child in state.children:
                child.cancel()
            await asyncio.gather(*state.children, return_exceptions=True)
        wall_s = self._clock() - state.t0
        return PhaseOutcome(name, round_index, tuple(state.results), wall_s, interrupted)

    def _record(self, state: _PhaseState, r: RequestResult) -> None:
        state.results.append(r)
        if not r.ok:
            state.num_errors += 1
            if self._errors_printed < NUM_ERRORS_PRINTED:
                self._errors_printed += 1
                self._log(f"[red]request {r.index} failed:[/red] {r.error}")
        self._progress.update(state.task_id, advance=1, errors=state.num_errors)

    def _spawn(self, state: _PhaseState, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        state.children.add(task)

    async def _open_loop(
        self, state: _PhaseState, specs: tuple[RequestSpec, ...], model: str, policy: str | None
    ) -> None:
        """Send in order, each at its arrival time (if any) once a concurrency slot is free."""
        slots = asyncio.Semaphore(self._cfg.concurrency)

        async def one(spec: RequestSpec) -> None:
            try:
                r = await self._client.send(spec, model, policy, state.t0)
            finally:
                slots.release()
            self._record(state, r)

        for spec in specs:
            if spec.arrival_s is not None:
                delay = state.t0 + spec.arrival_s - self._clock()
                if delay > 0:
                    await asyncio.sleep(delay)
            await slots.acquire()
            self._spawn(state, one(spec))
        await asyncio.gather(*state.children)

    async def _agents(
        self, state: _PhaseState, factory: PromptFactory, model: str, policy: str | None
    ) -> None:
        """Every agent runs its steps in sequence; agents run concurrently (up to the
        concurrency limit). An agent whose step fails stops there."""
        cfg = self._cfg
        slots = asyncio.Semaphore(cfg.concurrency)

        phase = uuid.uuid4().hex[:12]  # conversations never span phases

        async def agent_loop(agent: int) -> None:
            conv = start_conversation(agent, cfg, factory, key=f"bench-{phase}-agent-{agent}")
            for step in range(cfg.steps):
                async with slots:
                    spec = step_request(conv, cfg, time.time())
                    r = await self._client.send(spec, model, policy, state.t0)
                self._record(state, r)
                if not r.ok:
                    self._progress.update(state.task_id, advance=cfg.steps - step - 1)
                    return
                conv = advance(conv, r.text, cfg, factory)

        for agent in range(cfg.agents):
            self._spawn(state, agent_loop(agent))
        await asyncio.gather(*state.children)


def _plan_notes(plan: WorkloadPlan, cfg: BenchConfig) -> list[str]:
    notes = []
    if plan.num_input_clipped:
        notes.append(
            f"{plan.num_input_clipped} of {len(plan.specs)} prompts clipped to "
            f"--max-input-tokens {cfg.max_input_tokens}"
        )
    if plan.num_output_clipped:
        notes.append(
            f"{plan.num_output_clipped} of {len(plan.specs)} outputs clipped to "
            f"--max-output-tokens {cfg.max_output_tokens}"
        )
    if plan.num_skipped:
        notes.append(f"{plan.num_skipped} over-long requests skipped (--clip-mode skip)")
    if cfg.workload == "trace":
        notes.append(
            f"trace scaled: input lengths and block size x{cfg.trace_length_scale:g} "
            f"(block {max(1, round(cfg.trace_block_tokens * cfg.trace_length_scale))} tokens), "
            f"inter-arrival times x{cfg.trace_time_scale:g}"
        )
    return notes
