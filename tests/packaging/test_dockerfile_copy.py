"""Each Dockerfile's COPY sources exist in the build context, and its `pip install` step finds
every file it reads (constraints, the project, the package folders) where it runs.

test_docker_context.py builds, installs and imports pdserve from Dockerfile.cpu's install
folder; the last test here makes that stand for Dockerfile.gpu as well.
"""

from __future__ import annotations

import pathlib
import posixpath

import pytest

from tests.packaging.build_context import DOCKERFILES, REPO_ROOT, package_dirs, pyproject
from tests.packaging.dockerfiles import (
    Dockerfile,
    PipInstall,
    UnsupportedInstruction,
    source_in_context,
)


@pytest.mark.parametrize("variant", sorted(DOCKERFILES))
def test_copy_sources_exist_in_the_build_context(variant: str, context: frozenset[str]) -> None:
    dockerfile = Dockerfile.read(DOCKERFILES[variant])
    copies = dockerfile.copy_sources()
    assert copies, "the image copies nothing from the context"
    for line, sources in copies:
        missing = [s for s in sources if not source_in_context(context, s)]
        assert missing == [], f"{dockerfile.path.name}:{line}: not in the build context: {missing}"


@pytest.mark.parametrize("variant", sorted(DOCKERFILES))
def test_install_step_finds_its_files_in_the_image(variant: str, context: frozenset[str]) -> None:
    dockerfile = Dockerfile.read(DOCKERFILES[variant])
    image = dockerfile.image_files(context)
    installs = [i for i in dockerfile.pip_installs() if i.local_projects]
    assert installs, "no `pip install` of the project found"
    project = pyproject(REPO_ROOT)
    for install in installs:
        for constraints in install.constraint_files:
            assert constraints in image, f"line {install.line}: {constraints} is not in the image"
        for folder in install.local_projects:
            needed = ["pyproject.toml", project["project"]["readme"]]
            needed += [f"{d}/__init__.py" for d in package_dirs(project).values()]
            missing = [n for n in needed if posixpath.join(folder, n) not in image]
            assert missing == [], f"line {install.line}: pip install {folder} lacks {missing}"
    if variant == "cpu":  # `make install`'s pins, as scripts/install.sh uses them
        assert "/opt/pdserve/constraints/cpu.txt" in installs[0].constraint_files


def test_both_images_install_the_same_files(context: frozenset[str]) -> None:
    cpu = Dockerfile.read(DOCKERFILES["cpu"]).project_files(context)
    gpu = Dockerfile.read(DOCKERFILES["gpu"]).project_files(context)
    assert cpu[0] == gpu[0] == "/opt/pdserve"
    assert cpu[1] == gpu[1]


# --------------------------------------------------------------- the model can say no
def _write(tmp_path: pathlib.Path, text: str) -> Dockerfile:
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return Dockerfile.read(path)


def test_model_reports_missing_sources_and_install_inputs(tmp_path: pathlib.Path) -> None:
    context = frozenset({"pyproject.toml", "README.md", "pdserve/__init__.py", "c/pins.txt"})
    dockerfile = _write(
        tmp_path,
        "FROM python:3.11-slim\nWORKDIR /app\nCOPY pyproject.toml README.md ./\n"
        "COPY pdserve ./pdserve\nCOPY bench ./bench\n"
        "RUN python -m pip install --no-cache-dir --extra-index-url https://x/simple "
        "-c c/pins.txt '.[cpu]' && pip uninstall -y torchvision\n",
    )
    assert [source_in_context(context, s) for _, ss in dockerfile.copy_sources() for s in ss] == [
        True, True, True, False,
    ]  # fmt: skip
    assert dockerfile.image_files(context) == {
        "/app/pyproject.toml": "pyproject.toml",
        "/app/README.md": "README.md",
        "/app/pdserve/__init__.py": "pdserve/__init__.py",
    }
    assert dockerfile.pip_installs() == [PipInstall(6, ("/app/c/pins.txt",), ("/app",))]


@pytest.mark.parametrize(
    "instruction",
    ["ADD . ./", "COPY --from=build /x ./", "COPY *.toml ./", "COPY ${SRC} ./", 'COPY ["a", "b"]'],
)
def test_model_refuses_what_it_does_not_simulate(tmp_path: pathlib.Path, instruction: str) -> None:
    dockerfile = _write(tmp_path, f"FROM python:3.11-slim\n{instruction}\n")
    with pytest.raises(UnsupportedInstruction):
        dockerfile.image_files(frozenset({"a"}))
