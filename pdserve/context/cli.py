"""`pdserve context` (typer): what-ifs on a recorded agent run's context.

`pdserve context whatif REPORT.json` replays the agent runs of a `pdserve bench --workload
agent` report under context-trimming policies and prints, per policy, the prompt tokens sent
and prefilled, the estimated prefill seconds (the config's cost model) and prefix breaks,
then the recommendation. Registered in pdserve/cli.py. Exit status: 0 done; 2 bad options,
config or report.
"""

from __future__ import annotations

import json
import pathlib
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pdserve.cluster_cli import ConfigOpt, load
from pdserve.context.history import ReportError, load_conversations
from pdserve.context.policies import POLICY_SYNTAX, TrimPolicy, parse_policy
from pdserve.context.report import build_report, recorded_note
from pdserve.context.whatif import WhatIf, default_policies, evaluate

context_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="What-ifs on a recorded agent run's context (pdserve bench --workload agent).",
)


@context_app.command(
    "whatif",
    short_help="What context trimming would save in prefill, and which keeps the prefix stable.",
)
def whatif(
    report: Annotated[
        pathlib.Path,
        typer.Argument(
            help="A `pdserve bench --workload agent --json` report.", show_default=False
        ),
    ],
    config: ConfigOpt = None,
    policy: Annotated[
        str | None,
        typer.Option(help="The report's policy entry whose agent runs to replay (default: first)."),
    ] = None,
    trim: Annotated[
        list[str] | None,
        typer.Option(
            "--trim",
            help=f"A trimming policy to compare; repeat for several: {POLICY_SYNTAX}. Default: "
            "none, drop-tool-results:2 and both caps at half the largest recorded prompt.",
        ),
    ] = None,
    json_path: Annotated[
        pathlib.Path | None, typer.Option("--json", help="Also write the result as JSON here.")
    ] = None,
) -> None:
    """Estimate the prefill tokens and seconds context trimming would save on a recorded agent
    run, and which trimming keeps the prompt prefix (the prefix cache) stable."""
    console = Console()
    policies = _policies(trim)
    cfg = load(config, console)
    routing = cfg.router.routing
    try:
        loaded = load_conversations(json.loads(report.read_text()), policy)
    except (OSError, ValueError) as exc:  # ReportError and JSONDecodeError are ValueErrors
        what = "" if isinstance(exc, ReportError) else "not a readable JSON report: "
        console.print(f"[red]error:[/red] {escape(str(report))}: {what}{escape(str(exc))}")
        raise typer.Exit(2) from exc
    chosen = policies or default_policies(loaded.conversations)
    result = evaluate(chosen, loaded.conversations, routing.cost_model, routing.block_size_tokens)
    out = build_report(
        result,
        report_path=str(report),
        report_policy=loaded.policy_name,
        block_size_tokens=routing.block_size_tokens,
        cost_model=routing.cost_model,
        notes=[*loaded.notes, recorded_note(result)],
    )
    num = len(loaded.conversations)
    title = f"{num} agent run{'s' if num > 1 else ''} of {loaded.policy_name!r} in {report}"
    console.print(_table(result, title))
    for line in out.verdict:
        console.print(escape(line))
    for note in out.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]")
    if json_path is not None:
        try:
            json_path.write_text(out.model_dump_json(indent=2) + "\n")
        except OSError as exc:
            console.print(f"[red]error:[/red] cannot write {escape(str(json_path))}: {exc}")
            raise typer.Exit(2) from exc
        console.print(f"report written to {escape(str(json_path))}")


def _policies(trim: list[str] | None) -> tuple[TrimPolicy, ...]:
    try:
        return tuple(parse_policy(t) for t in trim or ())
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--trim") from exc


def _pct(fraction: float) -> str:
    text = f"{fraction:.0%}"
    return "0%" if text == "-0%" else text


def _table(result: WhatIf, title: str) -> Table:
    caption = (
        "tok = prompt tokens (all steps); est. prefill s from the config's cost model; "
        "breaks = steps that broke the prefix / steps; final = mean prompt tokens at a run's "
        "last step; * = recommended (least est. prefill s)"
    )
    headers = ("policy", "sent\ntok", "prefilled\ntok", "est.\nprefill s", "saved\nvs none",
               "prefix\nbreaks", "stable\nprefix", "final\nprompt tok")  # fmt: skip
    rows = [
        (
            t.policy + (" *" if t.policy == result.recommended else ""),
            f"{t.num_sent_tokens:,}",
            f"{t.num_computed_tokens:,}",
            f"{t.prefill_seconds:.3f}",
            f"{t.saved_prefill_seconds:.3f} s ({_pct(t.saved_prefill_seconds_fraction)})\n"
            f"{t.saved_prefill_tokens:,} tok ({_pct(t.saved_prefill_tokens_fraction)})",
            f"{t.num_prefix_breaks}/{t.num_steps}",
            "yes" if t.stable_prefix else "no",
            f"{t.final_prompt_tokens_mean:,.0f}",
        )
        for t in result.totals
    ]
    table = Table(title=escape(title), caption=caption)
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table
