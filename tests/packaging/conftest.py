"""Fixtures for the image checks: the build context, and pdserve installed from it into a fresh
venv (built once per session; ~10 s)."""

from __future__ import annotations

import pytest

from tests.packaging import fresh_venv
from tests.packaging.build_context import (
    DOCKERFILES,
    REPO_ROOT,
    context_files,
    dockerignore_patterns,
    materialize,
)
from tests.packaging.dockerfiles import Dockerfile
from tests.packaging.fresh_venv import FreshInstall


@pytest.fixture(scope="session")
def context() -> frozenset[str]:
    return context_files(REPO_ROOT, dockerignore_patterns(REPO_ROOT))


@pytest.fixture(scope="session")
def fresh_install(
    tmp_path_factory: pytest.TempPathFactory, context: frozenset[str]
) -> FreshInstall:
    work = tmp_path_factory.mktemp("image")
    _, files = Dockerfile.read(DOCKERFILES["cpu"]).project_files(context)
    project_dir = work / "opt-pdserve"
    materialize(REPO_ROOT, files, project_dir)
    (work / "dist").mkdir()
    wheel = fresh_venv.build_wheel(project_dir, work / "dist")
    python = fresh_venv.make_venv(work / "venv", wheel)
    return FreshInstall(project_dir, wheel, python)
