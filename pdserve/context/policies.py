"""Context-trimming policies an agent framework might apply (pure).

Each policy answers, for one step of a recorded conversation: which messages would the
prompt keep? `keep` is called once per policy per step, in step order, by `whatif.replay`;
`previous` is what the same policy kept at the step before (None at the first step), which
only the batched cap needs. Message ids are the conversation's message indices (the history
is append-only, so an id names the same message at every step); the result is sorted.

    none                     keep everything (the run as recorded)
    drop-tool-results:K      drop tool results (role "tool") K or more steps old
    cap-history:T            system messages + the first user message + the newest others
                             that fit a T-token prompt (a window sliding every step)
    cap-history-batched:T    append until the prompt passes T, then cut back to T/2 at once

The caps always keep the newest message, even when it alone passes the cap (the agent must
see its latest tool result), and keep a contiguous run of the newest messages (a window, not
a knapsack of whichever old messages happen to fit).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdserve.context.history import Conversation, Step

Kept = tuple[int, ...]
"""The ids of the messages a prompt keeps, ascending."""

POLICY_SYNTAX = (
    "none, drop-tool-results:K (K >= 1 steps), cap-history:T or cap-history-batched:T "
    "(T >= 2 prompt tokens)"
)


def prompt_tokens(step: Step, ids: tuple[int, ...]) -> int:
    """Tokens of the prompt made of messages `ids` of `step`, plus its trailing template."""
    return sum(step.messages[i].num_tokens for i in ids) + step.num_tail_tokens


def _pinned(step: Step) -> frozenset[int]:
    """Messages a cap never drops: every system message and the first user message."""
    system = {m.index for m in step.messages if m.role == "system"}
    first_user = next((m.index for m in step.messages if m.role == "user"), None)
    return frozenset(system if first_user is None else {*system, first_user})


def _window(step: Step, candidate: tuple[int, ...], max_prompt_tokens: int) -> tuple[int, ...]:
    """The pinned messages of `candidate` plus its newest other messages that fit a prompt
    of `max_prompt_tokens` (at least the newest one)."""
    pinned = _pinned(step)
    kept = [i for i in candidate if i in pinned]
    others = [i for i in candidate if i not in pinned]
    used = prompt_tokens(step, tuple(kept))
    start = len(others)
    while start > 0:
        cost = step.messages[others[start - 1]].num_tokens
        if used + cost > max_prompt_tokens and start < len(others):
            break
        used += cost
        start -= 1
    return tuple(sorted([*kept, *others[start:]]))


def _all(step: Step) -> tuple[int, ...]:
    return tuple(range(len(step.messages)))


@dataclass(frozen=True, slots=True)
class KeepAll:
    """`none`: the prompt as recorded."""

    @property
    def name(self) -> str:
        return "none"

    def keep(self, conv: Conversation, pos: int, previous: Kept | None) -> Kept:
        return _all(conv.steps[pos])


@dataclass(frozen=True, slots=True)
class DropToolResults:
    """`drop-tool-results:K`: tool results leave the prompt once they are K steps old. They
    leave from the middle of the prompt, so the prefix breaks whenever one comes of age."""

    min_age_steps: int

    @property
    def name(self) -> str:
        return f"drop-tool-results:{self.min_age_steps}"

    def keep(self, conv: Conversation, pos: int, previous: Kept | None) -> Kept:
        step = conv.steps[pos]
        return tuple(
            m.index
            for m in step.messages
            if m.role != "tool" or step.step - conv.first_step_of(m.index) < self.min_age_steps
        )


@dataclass(frozen=True, slots=True)
class CapHistory:
    """`cap-history:T`: a sliding window. Once the history passes T tokens every step drops
    the oldest unpinned messages, so the prefix breaks every step from then on."""

    max_prompt_tokens: int

    @property
    def name(self) -> str:
        return f"cap-history:{self.max_prompt_tokens}"

    def keep(self, conv: Conversation, pos: int, previous: Kept | None) -> Kept:
        step = conv.steps[pos]
        everything = _all(step)
        if prompt_tokens(step, everything) <= self.max_prompt_tokens:
            return everything
        return _window(step, everything, self.max_prompt_tokens)


@dataclass(frozen=True, slots=True)
class CapHistoryBatched:
    """`cap-history-batched:T`: append to what was kept; when that passes T tokens, cut back
    to a T/2 window in one go. The prefix breaks only at the cuts."""

    max_prompt_tokens: int

    @property
    def name(self) -> str:
        return f"cap-history-batched:{self.max_prompt_tokens}"

    def keep(self, conv: Conversation, pos: int, previous: Kept | None) -> Kept:
        step = conv.steps[pos]
        if previous is None or pos == 0:
            candidate = _all(step)
        else:
            num_before = len(conv.steps[pos - 1].messages)
            candidate = (*previous, *range(num_before, len(step.messages)))
        if prompt_tokens(step, candidate) <= self.max_prompt_tokens:
            return candidate
        return _window(step, candidate, self.max_prompt_tokens // 2)


TrimPolicy = KeepAll | DropToolResults | CapHistory | CapHistoryBatched


def parse_policy(text: str) -> TrimPolicy:
    """The policy a string names, e.g. `drop-tool-results:2`; ValueError naming the accepted
    forms when it names none."""
    kind, sep, arg = text.strip().partition(":")
    if kind == "none" and not sep:
        return KeepAll()
    makers: dict[str, tuple[type[DropToolResults | CapHistory | CapHistoryBatched], int]] = {
        "drop-tool-results": (DropToolResults, 1),
        "cap-history": (CapHistory, 2),
        "cap-history-batched": (CapHistoryBatched, 2),
    }
    if kind not in makers:
        raise ValueError(f"unknown trimming policy {text!r}: use {POLICY_SYNTAX}")
    cls, least = makers[kind]
    try:
        value = int(arg)
    except ValueError:
        raise ValueError(
            f"{text!r}: {kind} needs a whole number after the colon, e.g. {kind}:"
            f"{2 if cls is DropToolResults else 3000}"
        ) from None
    if value < least:
        raise ValueError(f"{text!r}: the number must be >= {least} ({POLICY_SYNTAX})")
    return cls(value)
