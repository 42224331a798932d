"""Replay recorded agent conversations under trimming policies and cost each prompt (pure).

`evaluate` is called once per `pdserve context whatif`. For each policy and each step it
takes the kept messages (`TrimPolicy.keep`) and costs the prompt they make:

    sent     = kept messages' tokens + the step's trailing template tokens
    cached   = tokens of the kept messages that lead both this step's and the previous
               step's kept list (message-granular prefix match), capped at sent - 1 (an
               engine always computes the last prompt token) and rounded down to whole
               prefix-cache blocks (engines cache full blocks only); 0 at the first step
    computed = sent - cached
    seconds  = CostModel.est_prefill_s(num_uncached_tokens=computed, num_cached_tokens=cached)

A step breaks the prefix when its kept list does not start with the previous step's (an
earlier kept message was dropped). `none` is always evaluated, first, as the baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pdserve.context.history import Conversation, Step
from pdserve.context.policies import (
    CapHistory,
    CapHistoryBatched,
    DropToolResults,
    KeepAll,
    TrimPolicy,
    prompt_tokens,
)
from pdserve.router.policy.cost_model import CostModel


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """One step of one conversation under one policy."""

    step: int
    kept: tuple[int, ...]
    num_sent_tokens: int
    num_cached_tokens: int
    num_computed_tokens: int
    prefill_seconds: float
    breaks_prefix: bool


@dataclass(frozen=True, slots=True)
class PolicyTotals:
    """One policy over every usable conversation, and what it saves against `none`."""

    policy: str
    num_steps: int
    num_prefix_breaks: int
    num_sent_tokens: int
    num_cached_tokens: int
    num_computed_tokens: int
    prefill_seconds: float
    final_prompt_tokens_mean: float
    """Mean prompt tokens at each conversation's last step: how much context the model
    still sees at the end."""
    sent_tokens_fraction: float
    """Tokens sent / tokens `none` sends: the share of the history the model sees."""
    saved_prefill_tokens: int
    saved_prefill_tokens_fraction: float
    saved_prefill_seconds: float
    saved_prefill_seconds_fraction: float

    @property
    def stable_prefix(self) -> bool:
        """No step dropped a message an earlier step had kept: the prefix cache keeps
        working for the whole conversation."""
        return self.num_prefix_breaks == 0


@dataclass(frozen=True, slots=True)
class WhatIf:
    """Every policy's totals (`none` first) and the recommendation."""

    totals: tuple[PolicyTotals, ...]
    recommended: str
    """The policy with the least estimated prefill seconds (ties: fewer prefix breaks, then
    the order given)."""
    num_conversations: int
    num_recorded_cached_tokens: int
    """Cached tokens the engine reported when the run was recorded, over the steps that
    reported them (for comparison with the model's `none` row)."""
    num_steps_without_recorded_cache: int
    """Steps whose recorded cached tokens are unknown."""


def cached_tokens(
    step: Step,
    kept: tuple[int, ...],
    previous: tuple[int, ...] | None,
    block_size_tokens: int,
) -> int:
    """Prefix-cache hit of a prompt of `kept` messages after one of `previous` (None: the
    first step, nothing cached)."""
    if previous is None:
        return 0
    common = 0
    for a, b in zip(kept, previous, strict=False):
        if a != b:
            break
        common += 1
    hit = min(
        sum(step.messages[i].num_tokens for i in kept[:common]),
        prompt_tokens(step, kept) - 1,
    )
    return max(0, hit) // block_size_tokens * block_size_tokens


def replay(
    policy: TrimPolicy, conv: Conversation, cost_model: CostModel, block_size_tokens: int
) -> tuple[StepOutcome, ...]:
    """Every step of `conv` as `policy` would have sent it."""
    outcomes: list[StepOutcome] = []
    previous: tuple[int, ...] | None = None
    for pos, step in enumerate(conv.steps):
        kept = policy.keep(conv, pos, previous)
        sent = prompt_tokens(step, kept)
        cached = cached_tokens(step, kept, previous, block_size_tokens)
        computed = sent - cached
        breaks = previous is not None and kept[: len(previous)] != previous
        seconds = cost_model.est_prefill_s(num_uncached_tokens=computed, num_cached_tokens=cached)
        outcomes.append(StepOutcome(step.step, kept, sent, cached, computed, seconds, breaks))
        previous = kept
    return tuple(outcomes)


def _fraction(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def evaluate(
    policies: Sequence[TrimPolicy],
    conversations: Sequence[Conversation],
    cost_model: CostModel,
    block_size_tokens: int,
) -> WhatIf:
    """Totals of `none` and of each of `policies` (duplicates once) over `conversations`."""
    if not conversations:
        raise ValueError("no conversation to evaluate")
    ordered: dict[str, TrimPolicy] = {"none": KeepAll()}
    for p in policies:
        ordered.setdefault(p.name, p)
    runs = {
        name: [replay(p, c, cost_model, block_size_tokens) for c in conversations]
        for name, p in ordered.items()
    }
    base = _sums(runs["none"])
    totals = []
    for name, outs in runs.items():
        sent, cached, computed, seconds, breaks, steps = _sums(outs)
        totals.append(
            PolicyTotals(
                policy=name,
                num_steps=steps,
                num_prefix_breaks=breaks,
                num_sent_tokens=sent,
                num_cached_tokens=cached,
                num_computed_tokens=computed,
                prefill_seconds=seconds,
                final_prompt_tokens_mean=sum(o[-1].num_sent_tokens for o in outs) / len(outs),
                sent_tokens_fraction=_fraction(sent, base[0]),
                saved_prefill_tokens=base[2] - computed,
                saved_prefill_tokens_fraction=_fraction(base[2] - computed, base[2]),
                saved_prefill_seconds=base[3] - seconds,
                saved_prefill_seconds_fraction=_fraction(base[3] - seconds, base[3]),
            )
        )
    best = min(enumerate(totals), key=lambda it: (it[1].prefill_seconds,
                                                  it[1].num_prefix_breaks, it[0]))  # fmt: skip
    recorded = [s.num_recorded_cached_tokens for c in conversations for s in c.steps]
    known = [n for n in recorded if n is not None]
    return WhatIf(
        tuple(totals), best[1].policy, len(conversations), sum(known), len(recorded) - len(known)
    )


def _sums(outs: Sequence[tuple[StepOutcome, ...]]) -> tuple[int, int, int, float, int, int]:
    """(sent, cached, computed tokens, prefill seconds, prefix breaks, steps) over runs."""
    flat = [o for run in outs for o in run]
    return (
        sum(o.num_sent_tokens for o in flat),
        sum(o.num_cached_tokens for o in flat),
        sum(o.num_computed_tokens for o in flat),
        sum(o.prefill_seconds for o in flat),
        sum(o.breaks_prefix for o in flat),
        len(flat),
    )


def round_cap_tokens(tokens: float) -> int:
    """`tokens` rounded down to two significant digits (4313 -> 4300, 525 -> 520), >= 2."""
    whole = int(tokens)
    unit = 10 ** max(0, len(str(whole)) - 2) if whole > 0 else 1
    return max(2, whole // unit * unit)


def default_policies(conversations: Sequence[Conversation]) -> tuple[TrimPolicy, ...]:
    """The policies compared when none are named: none, drop-tool-results:2, and both caps
    at half the largest recorded prompt (rounded)."""
    largest = max(
        prompt_tokens(s, tuple(range(len(s.messages)))) for c in conversations for s in c.steps
    )
    cap = round_cap_tokens(largest / 2)
    return (KeepAll(), DropToolResults(2), CapHistory(cap), CapHistoryBatched(cap))
