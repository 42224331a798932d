"""`pdserve down` finds its own cluster's processes, including ones that hide their origin."""

from __future__ import annotations

import subprocess
import time

from pdserve import local_cluster


def test_descendants_include_grandchildren_that_renamed_themselves() -> None:
    # A parent with a child and a grandchild, like raylet -> agent -> worker. `exec -a`
    # renames the grandchild, as Ray's agents rename their process titles.
    parent = subprocess.Popen(
        ["bash", "-c", "(bash -c 'exec -a ray::SomeAgent sleep 30'; true) & wait"]
    )
    try:
        deadline = time.monotonic() + 5
        found: list[int] = []
        while time.monotonic() < deadline:
            found = local_cluster._descendants([parent.pid])
            if len(found) >= 2 and any(_argv0(p) == "ray::SomeAgent" for p in found):
                break
            time.sleep(0.05)
        assert "ray::SomeAgent" in {_argv0(pid) for pid in found}
        assert parent.pid not in found
        assert all(pid != 1 for pid in found)
    finally:
        parent.kill()
        subprocess.run(["pkill", "-f", "ray::SomeAgent"], check=False)
        parent.wait()


def _argv0(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].decode()
    except OSError:
        return ""


def test_descendants_of_a_process_without_children_is_empty() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert local_cluster._descendants([proc.pid]) == []
    finally:
        proc.kill()
        proc.wait()
