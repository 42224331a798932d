"""The what-if's JSON report (`pdserve context whatif --json`) and its verdict in words (pure).

`build_report` is called once per command run with `evaluate`'s result; `verdict_lines` is
what the command prints under its table and what the report's `verdict` holds.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pdserve.context.whatif import PolicyTotals, WhatIf
from pdserve.router.policy.cost_model import CostModel


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PolicyRow(_Out):
    """One trimming policy over every analysed run (tokens, and seconds from the cost model)."""

    policy: str = Field(description="The policy, as --trim spells it.")
    num_steps: int = Field(description="Agent steps (requests) replayed.")
    num_prefix_breaks: int = Field(description="Steps that dropped a message kept before.")
    stable_prefix: bool = Field(description="No prefix break in any run.")
    num_sent_tokens: int = Field(description="Prompt tokens sent, all steps.")
    num_cached_tokens: int = Field(description="Of those, found in the prefix cache.")
    num_computed_tokens: int = Field(description="Of those, prefilled (sent - cached).")
    prefill_seconds: float = Field(description="Estimated prefill seconds, all steps.")
    saved_prefill_tokens: int = Field(description="Prefilled tokens saved against `none`.")
    saved_prefill_tokens_fraction: float = Field(description="The same, as a fraction.")
    saved_prefill_seconds: float = Field(description="Estimated seconds saved against `none`.")
    saved_prefill_seconds_fraction: float = Field(description="The same, as a fraction.")
    final_prompt_tokens_mean: float = Field(description="Mean prompt tokens at runs' last step.")
    sent_tokens_fraction: float = Field(description="Tokens sent / tokens `none` sends.")


class WhatIfReport(_Out):
    """What `pdserve context whatif` found (version 1)."""

    version: Literal[1] = 1
    report_path: str = Field(description="The bench report the runs came from.")
    report_policy: str = Field(description="Its policy entry whose agent runs were replayed.")
    num_conversations: int = Field(description="Agent runs analysed.")
    block_size_tokens: int = Field(description="Prefix-cache block size of the config.")
    cost_model: CostModel = Field(description="The config's cost model the seconds come from.")
    policies: list[PolicyRow] = Field(description="One row per policy, `none` first.")
    recommended: str = Field(description="The policy with the least estimated prefill seconds.")
    stable_policies: list[str] = Field(description="Policies that never break the prefix.")
    verdict: list[str] = Field(description="The verdict, as printed.")
    notes: list[str] = Field(description="Skipped runs and other caveats.")


def _row(t: PolicyTotals) -> PolicyRow:
    return PolicyRow(
        policy=t.policy,
        num_steps=t.num_steps,
        num_prefix_breaks=t.num_prefix_breaks,
        stable_prefix=t.stable_prefix,
        num_sent_tokens=t.num_sent_tokens,
        num_cached_tokens=t.num_cached_tokens,
        num_computed_tokens=t.num_computed_tokens,
        prefill_seconds=t.prefill_seconds,
        saved_prefill_tokens=t.saved_prefill_tokens,
        saved_prefill_tokens_fraction=t.saved_prefill_tokens_fraction,
        saved_prefill_seconds=t.saved_prefill_seconds,
        saved_prefill_seconds_fraction=t.saved_prefill_seconds_fraction,
        final_prompt_tokens_mean=t.final_prompt_tokens_mean,
        sent_tokens_fraction=t.sent_tokens_fraction,
    )


def verdict_lines(result: WhatIf, block_size_tokens: int) -> list[str]:
    """The recommendation, which policies keep the prefix stable, and the caveats."""
    by_name = {t.policy: t for t in result.totals}
    base, best = by_name["none"], by_name[result.recommended]
    lines = []
    if best.policy == "none":
        lines.append(
            "Recommended: none — no trimming policy tried lowers the estimated prefill time "
            f"({base.prefill_seconds:.3g} s)."
        )
    else:
        lines.append(
            f"Recommended: {best.policy} — est. prefill {best.prefill_seconds:.3g} s vs "
            f"{base.prefill_seconds:.3g} s with none (saves "
            f"{best.saved_prefill_seconds_fraction:.0%}, {best.saved_prefill_tokens:,} "
            f"prefilled tokens); {best.num_prefix_breaks} prefix breaks in {best.num_steps} steps."
        )
    stable = [t for t in result.totals if t.stable_prefix]
    lines.append(
        "Keep the prefix stable (0 prefix breaks, the prefix cache keeps working): "
        + ", ".join(t.policy for t in stable)
        + "."
    )
    broken = [t for t in result.totals if not t.stable_prefix]
    if broken:
        lines.append(
            "Break the prefix (the engine recomputes what follows the dropped message): "
            + ", ".join(
                f"{t.policy} ({t.num_prefix_breaks} of {t.num_steps} steps)" for t in broken
            )
            + "."
        )
    if not best.stable_prefix:
        calm = min(stable, key=lambda t: t.prefill_seconds)
        lines.append(
            f"Best with a stable prefix: {calm.policy} (est. prefill {calm.prefill_seconds:.3g} s)."
        )
    if best.policy != "none":
        lines.append(
            f"What the model sees: {best.policy} sends {best.sent_tokens_fraction:.0%} of the "
            f"tokens none sends; final prompt {best.final_prompt_tokens_mean:,.0f} tokens on "
            f"average vs {base.final_prompt_tokens_mean:,.0f}."
        )
    lines.append(
        "This is an estimate: seconds from the config's cost model, cache hits from "
        f"message-granular prefix matching in {block_size_tokens}-token blocks (a real engine "
        "may hit more, e.g. shared system prompts, or less, e.g. evictions). Trimming also "
        "changes what the model sees: answer quality is not estimated; check it on your task."
    )
    return lines


def recorded_note(result: WhatIf) -> str:
    """The recorded prefix-cache hits beside what the model counts for `none`."""
    base = next(t for t in result.totals if t.policy == "none")
    unknown = result.num_steps_without_recorded_cache
    steps = f"{unknown} step{'s' if unknown > 1 else ''}"
    where = f" ({steps} that did not report it left out)" if unknown else ""
    return (
        f"As recorded, the engine found {result.num_recorded_cached_tokens:,} prompt tokens in "
        f"its prefix cache over these runs{where}; the model counts "
        f"{base.num_cached_tokens:,} for none."
    )


def build_report(
    result: WhatIf,
    *,
    report_path: str,
    report_policy: str,
    block_size_tokens: int,
    cost_model: CostModel,
    notes: list[str],
) -> WhatIfReport:
    """The JSON report of one what-if."""
    return WhatIfReport(
        report_path=report_path,
        report_policy=report_policy,
        num_conversations=result.num_conversations,
        block_size_tokens=block_size_tokens,
        cost_model=cost_model,
        policies=[_row(t) for t in result.totals],
        recommended=result.recommended,
        stable_policies=[t.policy for t in result.totals if t.stable_prefix],
        verdict=verdict_lines(result, block_size_tokens),
        notes=notes,
    )
