"""Where tests leave what a person would look at after a run (screenshots of the HTML reports):
`$PDSERVE_TEST_ARTIFACTS`, else `test-artifacts/` at the repository root (git-ignored)."""

from __future__ import annotations

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def artifact(name: str) -> pathlib.Path:
    """A path for the artifact `name` (its folder created)."""
    folder = pathlib.Path(os.environ.get("PDSERVE_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name
