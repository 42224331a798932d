"""The Docker build context of this repository, computed without a Docker daemon.

Matching is Docker's own: the `docker` SDK's `exclude_paths` (a port of moby's patternmatcher:
`**`, `!` exceptions, a matched folder excludes everything under it, `..`/`.` cleaning).
The SDK always re-includes the Dockerfile and `.dockerignore` because the classic builder
sends them; BuildKit sends the Dockerfile separately, and with either builder COPY does not see
an ignored Dockerfile or `.dockerignore`. So the context here is what COPY sees: the files the
patterns leave in, nothing forced back. One known difference: the SDK matches case-insensitively
(Docker on Linux does not), so a pattern here may exclude slightly more than on Linux, never less.
"""

from __future__ import annotations

import pathlib
import shutil
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

from docker.utils.build import Pattern, exclude_paths

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKERIGNORE = ".dockerignore"
DOCKERFILES = {
    "cpu": REPO_ROOT / "docker" / "Dockerfile.cpu",
    "gpu": REPO_ROOT / "docker" / "Dockerfile.gpu",
}


def dockerignore_patterns(root: pathlib.Path) -> list[str]:
    """The patterns of root/.dockerignore as Docker reads them: one per line, surrounding
    whitespace stripped, blank lines and `#` comments dropped (the SDK's APIClient.build)."""
    lines = (root / DOCKERIGNORE).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def _ignores(patterns: Iterable[str], top_level_path: str) -> bool:
    """Whether the patterns exclude a top-level path: the last matching pattern decides."""
    ignored = False
    for pattern in (Pattern(p) for p in patterns):
        if pattern.dirs and pattern.match(top_level_path):
            ignored = not pattern.exclusion
    return ignored


def context_files(root: pathlib.Path, patterns: Iterable[str]) -> frozenset[str]:
    """Relative POSIX paths of the regular files (and symlinks) in the build context of root:
    what a `COPY . dest` would put in the image. Folders are implied by their files."""
    wanted = list(patterns)
    # dockerfile=".dockerignore": the SDK appends `!<dockerfile>`; naming the file it already
    # re-includes keeps any real Dockerfile subject to the patterns, as COPY sees it.
    paths = exclude_paths(str(root), list(wanted), dockerfile=DOCKERIGNORE)
    files = {
        p.replace("\\", "/") for p in paths if (root / p).is_symlink() or not (root / p).is_dir()
    }
    if _ignores(wanted, DOCKERIGNORE):
        files.discard(DOCKERIGNORE)
    return frozenset(files)


def materialize(root: pathlib.Path, files: Mapping[str, str], dest: pathlib.Path) -> None:
    """Copy root/<source> to dest/<target> for every target → source in files."""
    for target, source in files.items():
        out = dest / target
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / source, out, follow_symlinks=False)


def pyproject(root: pathlib.Path) -> dict[str, Any]:
    parsed: dict[str, Any] = tomllib.loads((root / "pyproject.toml").read_text())
    return parsed


def package_dirs(project: Mapping[str, Any]) -> dict[str, str]:
    """Import package → source folder for every package setuptools puts in the wheel
    (`packages` through `package-dir`: `pdserve.router.policy` → `router/policy`)."""
    setuptools = project["tool"]["setuptools"]
    mapping: dict[str, str] = setuptools.get("package-dir", {})
    dirs: dict[str, str] = {}
    for package in setuptools["packages"]:
        parts = package.split(".")
        for cut in range(len(parts), 0, -1):
            prefix = ".".join(parts[:cut])
            if prefix in mapping:
                dirs[package] = "/".join([mapping[prefix], *parts[cut:]])
                break
        else:
            dirs[package] = "/".join(parts)
    return dirs
