"""Build pdserve's wheel from a folder and install it into a fresh virtualenv, offline.

The fresh venv gets the wheel alone (`--no-deps`); the third-party packages come from the
project venv through a `.pth` file holding its site-packages path. A plain path line in a
`.pth` is only appended to sys.path: the `.pth` files inside that folder (among them the
editable install's finder for this checkout) are not run, so `import pdserve` resolves to the
fresh venv's copy. Tests assert that, never assume it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class FreshInstall:
    """pdserve as Dockerfile.cpu's install step would build it."""

    project_dir: pathlib.Path  # a copy of the image's install folder (/opt/pdserve)
    wheel: pathlib.Path
    python: pathlib.Path  # the fresh venv's interpreter


# Runs inside the fresh venv: import every module the installed pdserve has, load its entry
# points, and write what happened as JSON to argv[1]. Errors are collected, not raised, so one
# run reports all of them.
_IMPORT_EVERY_MODULE = r"""
import importlib, importlib.metadata, json, pkgutil, sys, traceback
out, skip = sys.argv[1], set(sys.argv[2:])
report = {"modules": {}, "errors": {}, "entry_points": {}, "skipped": sorted(skip)}
def failed(name, exc=None):
    report["errors"][name] = traceback.format_exc() if exc is None else repr(exc)
import pdserve
report["pdserve_file"] = pdserve.__file__
names = [m.name for m in pkgutil.walk_packages(pdserve.__path__, "pdserve.", onerror=failed)]
for name in ["pdserve", *names]:
    if name in skip:
        continue
    try:
        report["modules"][name] = importlib.import_module(name).__file__
    except BaseException:
        failed(name)
dist = importlib.metadata.distribution("pdserve")
report["dist_location"] = str(dist.locate_file(""))
for ep in dist.entry_points:
    try:
        ep.load()
        report["entry_points"][f"{ep.group}:{ep.name}"] = ep.value
    except BaseException:
        failed(f"entry point {ep.group}:{ep.name} = {ep.value}")
with open(out, "w") as f:
    json.dump(report, f)
"""


def clean_env() -> dict[str, str]:
    """This process's environment minus what could point Python at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env.update(PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", NO_COLOR="1")
    env["COLUMNS"] = "200"  # rich/typer help: one row per command
    return env


def _run(argv: Sequence[str | pathlib.Path], cwd: pathlib.Path) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=clean_env(), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def build_wheel(project: pathlib.Path, out_dir: pathlib.Path) -> pathlib.Path:
    """`pip wheel` the project folder with the project venv's setuptools, nothing downloaded."""
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", out_dir, project],
        cwd=project,
    )  # fmt: skip
    (wheel,) = out_dir.glob("pdserve-*.whl")
    return wheel


def make_venv(path: pathlib.Path, wheel: pathlib.Path) -> pathlib.Path:
    """A fresh venv with only the wheel installed (by this pip, `--python`), plus a `.pth`
    exposing the project venv's site-packages for third-party imports. Returns its python."""
    _run([sys.executable, "-m", "venv", "--without-pip", path], cwd=path.parent)
    python = path / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
         "-q", wheel],
        cwd=path.parent,
    )  # fmt: skip
    fresh_purelib = _run(
        [python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        cwd=path,
    ).strip()
    paths = sysconfig.get_paths()
    deps = dict.fromkeys([paths["purelib"], paths["platlib"]])  # project venv, in order
    pth = pathlib.Path(fresh_purelib) / "_project_venv_site_packages.pth"
    pth.write_text("".join(f"{p}\n" for p in deps))
    return python


def import_every_module(python: pathlib.Path, skip: Sequence[str]) -> dict[str, Any]:
    """Run the import walk in the venv of `python` (isolated mode, cwd outside the checkout)."""
    report_path = python.parent.parent / "import-report.json"
    _run([python, "-I", "-c", _IMPORT_EVERY_MODULE, report_path, *skip], cwd=python.parent)
    report: dict[str, Any] = json.loads(report_path.read_text())
    return report


def run_script(python: pathlib.Path, script: str, *args: str) -> str:
    """stdout of a console script installed in the venv of `python`."""
    return _run([python.parent / script, *args], cwd=python.parent.parent)
