"""`pdserve --help` and the README's CLI table name every registered command."""

from __future__ import annotations

import pathlib
import re

import typer.core
import typer.main
from typer.testing import CliRunner

from pdserve.cli import app

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _commands() -> dict[str, bool]:
    """Every registered command → whether it is hidden."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return {name: bool(cmd.hidden) for name, cmd in group.commands.items()}


def _help_rows() -> dict[str, list[str]]:
    """Command name → its description lines in the Commands panel of `pdserve --help`."""
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert result.exit_code == 0, result.output
    panel = result.output.split("Commands")[1]
    rows: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in panel.splitlines():
        m = re.match(r"^│ (\S+)?\s+(.*?)\s*│$", line)
        if not m:
            continue
        if m.group(1):
            current = rows.setdefault(m.group(1), [])
        if current is not None and m.group(2):
            current.append(m.group(2))
    return rows


def test_help_lists_every_command_with_a_one_line_description() -> None:
    commands = _commands()
    assert len(commands) >= 9
    assert not [name for name, hidden in commands.items() if hidden]
    rows = _help_rows()
    assert set(rows) == set(commands)
    for name, lines in rows.items():
        assert len(lines) == 1, f"`{name}` takes {len(lines)} lines in --help: {lines}"


def test_readme_cli_table_lists_every_command() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The CLI", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `pdserve ([a-z-]+)", section, flags=re.MULTILINE))
    assert listed == set(_commands())
