"""`pdserve bench --help` shows option help as written: rich would render the `:100:` of the
default `uniform:100:2000` as an emoji (💯) and drop `[...]` as a style tag."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from pdserve.bench.cli import _literal
from pdserve.cli import app

_EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf]")


def _help(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.output
    return result.output


def test_bench_help_shows_distribution_defaults_literally() -> None:
    out = _help("bench")
    assert "(default: uniform:100:2000)" in out
    assert "(default: uniform:16:64)" in out
    assert not _EMOJI.search(out), _EMOJI.findall(out)
    assert "\x1b" not in out


def test_a_default_of_zero_is_shown() -> None:
    """0 is a default like any other (it once compared equal to False and was hidden)."""
    line = next(x for x in _help("bench").splitlines() if "--seed" in x)
    assert "(default: 0)" in line


def test_literal_help_keeps_brackets_and_emoji_codes() -> None:
    """What rich markup would eat (a tag-like `[x]`, an emoji code) survives `_literal`."""
    import typer

    probe = typer.Typer()

    @probe.command()
    def run(x: str = typer.Option("", help=_literal("lengths [tokens] e.g. fixed:100:"))) -> None:
        del x

    out = CliRunner().invoke(probe, ["--help"], env={"COLUMNS": "240"}).output
    assert "lengths [tokens] e.g. fixed:100:" in out
