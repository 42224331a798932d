"""The images' build context (the repository minus .dockerignore) holds what `pip install .`
needs and nothing local, and pdserve built from exactly those files installs, imports and runs.

No Docker daemon: the context is computed with Docker's matcher (build_context.py), copied as
Dockerfile.cpu's `COPY . ./` lays it out in /opt/pdserve (dockerfiles.py), built into a wheel
and installed into a fresh venv whose only pdserve is that wheel (fresh_venv.py).
"""

from __future__ import annotations

import fnmatch
import os
import pathlib
import subprocess
import zipfile

import pytest
import typer.core
import typer.main
import yaml

from pdserve.cli import app
from tests.packaging import fresh_venv
from tests.packaging.build_context import (
    DOCKERFILES,
    REPO_ROOT,
    context_files,
    dockerignore_patterns,
    materialize,
    package_dirs,
    pyproject,
)
from tests.packaging.dockerfiles import Dockerfile
from tests.packaging.fresh_venv import FreshInstall

# Modules that cannot be imported without a GPU/CUDA, each with the reason. Empty: vLLM, torch
# and NIXL are imported lazily or work on CPU, so every pdserve module imports on this CPU
# machine. A module added here is still required to be in the wheel; only its import is left
# to the GPU image's own check (Dockerfile.gpu's RUN python3 -c "import ...").
CUDA_ONLY_MODULES: dict[str, str] = {}

# Top-level entries that exist in every checkout and must never reach an image.
NEVER_IN_IMAGE = (".git", "tests", "helm", "docs", ".ci", "docker", "scripts")
# Anywhere in the tree: caches, build metadata, local environments and state.
NEVER_IN_IMAGE_ANYWHERE = (
    "__pycache__", "*.pyc", "*.egg-info", ".venv", "venv", ".mypy_cache", ".mypy_tree",
    ".pytest_cache", ".ruff_cache", "node_modules", ".env", "*.log",
)  # fmt: skip


def _wheel_names(wheel: pathlib.Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


# ---------------------------------------------------------------------- the matcher itself
def test_context_matching_follows_dockerignore_rules(tmp_path: pathlib.Path) -> None:
    """The rules .dockerignore relies on: a folder pattern drops its contents, `**` reaches
    any depth, `!` re-includes, the last match wins, `#` lines are comments."""
    for path in (
        "pkg/__init__.py", "pkg/__pycache__/m.pyc", "pkg/sub/__pycache__/m.pyc",
        "tests/t.py", "tests/keep.txt", "notes.md", "README.md", "bench/results/r.json",
        "bench/b.py",
    ):  # fmt: skip
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    (tmp_path / ".dockerignore").write_text(
        "# comment\n**/__pycache__\ntests\n!tests/keep.txt\n*.md\n!README.md\n"
        "bench/results\n.dockerignore\n"
    )
    patterns = dockerignore_patterns(tmp_path)
    assert "# comment" not in patterns
    assert context_files(tmp_path, patterns) == {
        "pkg/__init__.py", "tests/keep.txt", "README.md", "bench/b.py",
    }  # fmt: skip


# ----------------------------------------------------------------------- what is in it
def test_context_has_what_pip_install_needs(context: frozenset[str]) -> None:
    project = pyproject(REPO_ROOT)
    assert {"pyproject.toml", project["project"]["readme"], "constraints/cpu.txt"} <= context
    for package, folder in package_dirs(project).items():
        assert f"{folder}/__init__.py" in context, f"{package} ({folder}/) is not in the image"
    assert "bench/__init__.py" in context  # pdserve.bench: the folder the old COPY list missed
    for package, globs in project["tool"]["setuptools"]["package-data"].items():
        folder = package_dirs(project)[package]
        for glob in globs:
            on_disk = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / folder).glob(glob)}
            assert on_disk and on_disk <= context, f"package data {folder}/{glob}"


def test_context_keeps_out_vcs_tests_chart_caches_and_local_state(
    context: frozenset[str],
) -> None:
    for top in NEVER_IN_IMAGE:
        assert (REPO_ROOT / top).exists(), f"{top} vanished: update NEVER_IN_IMAGE"
        leaked = sorted(p for p in context if p == top or p.startswith(f"{top}/"))
        assert not leaked, f"{top} goes into the image: {leaked[:5]}"
    for path in context:
        parts = path.split("/")
        for pattern in NEVER_IN_IMAGE_ANYWHERE:
            assert not fnmatch.filter(parts, pattern), f"{path} goes into the image ({pattern})"
    assert not any(p.startswith("bench/results/") for p in context)
    assert ".dockerignore" not in context


def test_nothing_git_ignores_goes_into_the_image(context: frozenset[str]) -> None:
    """.gitignore lists local state (venvs, caches, build output, bench/out); the image must
    not pick any of it up from a developer's checkout or CI's."""
    if not (REPO_ROOT / ".git").exists():
        if os.environ.get("CI"):  # CI checks out the repository: there the test must run
            pytest.fail("not a git checkout: .gitignore cannot be evaluated")
        pytest.skip("not a git checkout: .gitignore cannot be evaluated")
    done = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "check-ignore", "--stdin"],
        input="\n".join(sorted(context)),
        capture_output=True,
        text=True,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: nothing ignored
    assert done.stdout.split() == [], "git-ignored files in the build context"


# ------------------------------------------------------------- built, installed, imported
def test_wheel_holds_every_module_and_data_file_of_the_package_folders(
    fresh_install: FreshInstall, context: frozenset[str]
) -> None:
    """A module or subpackage folder that pyproject's `packages` forgets is missing from the
    image even though its folder was copied."""
    project = pyproject(fresh_install.project_dir)
    _, files = Dockerfile.read(DOCKERFILES["cpu"]).project_files(context)
    folders = {f: p for p, f in project["tool"]["setuptools"]["package-dir"].items()}
    expected: set[str] = set()
    for path in files:
        owner = max((f for f in folders if path.startswith(f"{f}/")), key=len, default=None)
        if owner is not None and path.endswith(".py"):
            expected.add(folders[owner].replace(".", "/") + path[len(owner) :])
    for package, globs in project["tool"]["setuptools"]["package-data"].items():
        folder = package_dirs(project)[package]
        for path in files:
            name = path[len(folder) + 1 :]
            if path.startswith(f"{folder}/") and any(fnmatch.fnmatch(name, g) for g in globs):
                expected.add(f"{package.replace('.', '/')}/{name}")
    in_wheel = _wheel_names(fresh_install.wheel)
    assert "pdserve/bench/__init__.py" in expected
    assert sorted(expected - in_wheel) == []


def test_every_pdserve_module_imports_from_the_fresh_install(fresh_install: FreshInstall) -> None:
    venv = fresh_install.python.parent.parent
    report = fresh_venv.import_every_module(fresh_install.python, sorted(CUDA_ONLY_MODULES))
    assert report["errors"] == {}, "\n".join(f"{k}:\n{v}" for k, v in report["errors"].items())
    # The wheel's copy, not the editable checkout the project venv points at.
    assert pathlib.Path(report["pdserve_file"]).is_relative_to(venv)
    assert pathlib.Path(report["dist_location"]).is_relative_to(venv)
    outside = {
        m: f for m, f in report["modules"].items() if not pathlib.Path(f).is_relative_to(venv)
    }
    assert outside == {}
    # Every module of the wheel was imported (or is a declared CUDA-only one).
    in_wheel = {
        name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for name in _wheel_names(fresh_install.wheel)
        if name.startswith("pdserve/") and name.endswith(".py")
    }
    assert set(report["modules"]) | set(CUDA_ONLY_MODULES) == in_wheel
    assert {"pdserve.bench", "pdserve.router.policy", "pdserve.deploy.app"} <= in_wheel
    assert {"console_scripts:pdserve", "vllm.general_plugins:pdserve_nixl_cpu"} <= set(
        report["entry_points"]
    )


def test_installed_cli_lists_every_command_and_prints_the_serve_config(
    fresh_install: FreshInstall,
) -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    commands = [name for name, cmd in group.commands.items() if not cmd.hidden]
    assert "bench" in commands
    out = fresh_venv.run_script(fresh_install.python, "pdserve", "--help")
    missing = [name for name in commands if f"│ {name} " not in out]
    assert missing == [], f"`pdserve --help` from the wheel lacks {missing}:\n{out}"
    # Run outside any checkout, the default config is the one packaged as pdserve.deploy data.
    serve_config = yaml.safe_load(
        fresh_venv.run_script(fresh_install.python, "pdserve", "serve-config")
    )
    (application,) = serve_config["applications"]
    assert application["import_path"] == "pdserve.deploy.app:build_app"


def test_a_context_without_bench_does_not_build(tmp_path: pathlib.Path) -> None:
    """The checks above can fail: ignore bench/ (the old images' bug) and the build breaks."""
    patterns = [*dockerignore_patterns(REPO_ROOT), "bench"]
    _, files = Dockerfile.read(DOCKERFILES["cpu"]).project_files(context_files(REPO_ROOT, patterns))
    materialize(REPO_ROOT, files, tmp_path / "project")
    (tmp_path / "dist").mkdir()
    with pytest.raises(AssertionError, match="'bench' does not exist"):
        fresh_venv.build_wheel(tmp_path / "project", tmp_path / "dist")
