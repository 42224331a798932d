"""Recorded agent conversations, read from a `pdserve bench --workload agent` report (pure).

`load_conversations` is called once per `pdserve context whatif` with the report's parsed
JSON; it validates only the keys the what-if needs (every other key is ignored, so newer
reports still load) and returns each usable run as a `Conversation`. Runs it cannot analyse
(no per-message token counts, messages that are not an append-only history) are skipped with
a note; a report with no agent runs, or none usable, raises `ReportError`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

RECORD_HINT = "record one with `pdserve bench --workload agent ...`"


class ReportError(ValueError):
    """A report the what-if cannot use; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Message:
    """Message `index`'s segment of one step's rendered prompt: its content plus the chat
    template's tokens before it (the role header)."""

    index: int
    role: str
    num_tokens: int


@dataclass(frozen=True, slots=True)
class Step:
    """One request of an agent loop: its messages and the template tokens after them."""

    step: int
    messages: tuple[Message, ...]
    num_tail_tokens: int
    """The trailing template (end of turn, generation prompt): recorded prompt tokens minus
    the messages' tokens. Every trimmed prompt still ends with it."""
    num_recorded_cached_tokens: int | None
    """What the serving engine found in its prefix cache when the run was recorded (None: not
    reported)."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """One agent run: an append-only history (message i at one step is message i at the
    next), its steps in order."""

    agent: int
    round_index: int
    steps: tuple[Step, ...]

    @property
    def label(self) -> str:
        return f"agent {self.agent} round {self.round_index}"

    def first_step_of(self, index: int) -> int:
        """The `step` number of the first step whose prompt holds message `index` (a
        message's age at step s is s minus this)."""
        for step in self.steps:
            if index < len(step.messages):
                return step.step
        raise ValueError(f"{self.label}: no step holds message {index}")


@dataclass(frozen=True, slots=True)
class LoadedRuns:
    """What `load_conversations` found: the usable runs, the report policy entry they came
    from, and notes on what was skipped."""

    policy_name: str
    conversations: tuple[Conversation, ...]
    notes: tuple[str, ...]


class _In(BaseModel):
    """Input models: lenient on keys the what-if does not read (reports grow fields)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class _MessageIn(_In):
    index: int = Field(ge=0)
    role: str
    tokens: int = Field(ge=0)


class _StepIn(_In):
    step: int = Field(ge=0)
    prompt_tokens: int | None = Field(default=None, ge=0)
    cached_tokens: int | None = Field(default=None, ge=0)
    messages: list[_MessageIn] | None = None


class _RunIn(_In):
    agent: int = 0
    round_index: int = 0
    steps: list[_StepIn]


class _PolicyIn(_In):
    agent_runs: list[_RunIn] | None = None


class _ReportIn(_In):
    workload: str | None = None
    policies: dict[str, _PolicyIn] = Field(default_factory=dict)


def load_conversations(data: Any, policy_name: str | None = None) -> LoadedRuns:
    """The usable agent runs of the report entry `policy_name` (default: the first entry).

    Raises ReportError when the JSON is not a bench report, the entry does not exist, it has
    no agent runs, or none of its runs can be analysed."""
    try:
        report = _ReportIn.model_validate(data)
    except ValidationError as exc:
        raise ReportError(f"not a pdserve bench report with agent runs: {exc}") from exc
    if not report.policies:
        raise ReportError(f"this report has no agent runs; {RECORD_HINT}")
    name = policy_name if policy_name is not None else next(iter(report.policies))
    if name not in report.policies:
        raise ReportError(
            f"no policy entry {name!r} in this report; it has: {', '.join(report.policies)}"
        )
    runs = report.policies[name].agent_runs
    if not runs:
        raise ReportError(f"this report has no agent runs; {RECORD_HINT}")
    usable: list[Conversation] = []
    skipped: Counter[str] = Counter()
    for run in runs:
        conv, reason = _conversation(run)
        if conv is None:
            skipped[reason] += 1
        else:
            usable.append(conv)
    notes = tuple(
        f"{n} of {len(runs)} runs skipped: {reason}" for reason, n in sorted(skipped.items())
    )
    if usable and not any(m.role == "tool" for c in usable for m in c.steps[-1].messages):
        notes += (
            "no message has role 'tool' (tool results sent as 'user'?): drop-tool-results "
            "drops nothing",
        )
    if not usable:
        raise ReportError(
            f"no agent run of {name!r} can be analysed ({'; '.join(notes)}); {RECORD_HINT} "
            "against a server that reports per-message prompt cost"
        )
    return LoadedRuns(policy_name=name, conversations=tuple(usable), notes=notes)


def _conversation(run: _RunIn) -> tuple[Conversation | None, str]:
    """The run as a Conversation, or None and why it cannot be analysed."""
    if not run.steps:
        return None, "no steps"
    steps: list[Step] = []
    for raw in sorted(run.steps, key=lambda s: s.step):
        if raw.messages is None:
            return None, "no per-message token counts (messages is null)"
        if raw.prompt_tokens is None:
            return None, "no prompt token count (prompt_tokens is null)"
        if steps and raw.step == steps[-1].step:
            return None, "two steps share one step number"
        if [m.index for m in raw.messages] != list(range(len(raw.messages))):
            return None, "messages are not numbered 0, 1, 2, ... in order"
        messages = tuple(Message(m.index, m.role, m.tokens) for m in raw.messages)
        tail = raw.prompt_tokens - sum(m.num_tokens for m in messages)
        if tail < 0:
            return None, "messages add up to more tokens than the prompt"
        if steps and not _extends(steps[-1].messages, messages):
            return None, "not an append-only history (a step dropped or changed a message)"
        steps.append(Step(raw.step, messages, tail, raw.cached_tokens))
    return Conversation(run.agent, run.round_index, tuple(steps)), ""


def _extends(before: tuple[Message, ...], after: tuple[Message, ...]) -> bool:
    return len(after) >= len(before) and all(
        a.role == b.role for a, b in zip(before, after, strict=False)
    )
