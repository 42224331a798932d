"""Where a serving layer's CPU goes: py-spy on its busiest Python processes under load.

Optional (`--profile-s N`): after a setup's first measured load, the harness sends a second,
unmeasured load and meanwhile runs `py-spy record --nonblocking --format raw` on the setup's
busiest serving processes. py-spy goes into the peer venv, never the product's. `summarize`
(pure) turns py-spy's collapsed stacks into the top frames by self and by inclusive samples.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from pdserve.bench.peers.peer_env import PEER_VENV, ensure_peer_env

PY_SPY = "py-spy==0.4.3"
_GENERIC_FRAMES = ("<module>", "_run_once (asyncio", "run (asyncio", "run_forever (asyncio")


def ensure_py_spy(log: Callable[[str], None]) -> str:
    """The py-spy binary of the peer venv (installed there on first use)."""
    binary = PEER_VENV / "bin" / "py-spy"
    if not binary.exists():
        python = ensure_peer_env(log)
        log(f"installing {PY_SPY} into {PEER_VENV}")
        subprocess.run(
            # --ignore-installed: the product venv is on the peer's path and may have one
            [str(python), "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", PY_SPY],
            check=True,
            capture_output=True,
        )
    found = str(binary) if binary.exists() else shutil.which("py-spy")
    if found is None:
        raise RuntimeError("py-spy could not be installed into the peer venv")
    return found


def start_recording(
    py_spy: str, pid: int, seconds: float, out: pathlib.Path
) -> subprocess.Popen[bytes]:
    """Start `py-spy record` on one process (non-blocking: the target is never paused)."""
    cmd = [py_spy, "record", "--nonblocking", "--format", "raw", "--rate", "50"]
    cmd += ["--duration", str(max(1, round(seconds))), "--pid", str(pid), "--output", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@dataclass(frozen=True)
class FrameShare:
    """One frame and its share of the process's samples."""

    frame: str
    share: float


@dataclass(frozen=True)
class ProfileSummary:
    """Top frames of one process: where it was (self) and what it was inside (inclusive)."""

    num_samples: int
    top_self: tuple[FrameShare, ...]
    top_inclusive: tuple[FrameShare, ...]


def summarize(raw: str, n: int = 12) -> ProfileSummary:
    """Summarize py-spy's raw (collapsed) output: lines `frame;frame;... count`, root first.

    Inclusive shares count each frame once per stack; generic event-loop frames are left out
    of the inclusive list (they cover everything)."""
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        self_counts[frames[-1]] += count
        for frame in set(frames[1:]):  # frames[0] is the thread / process root
            if not frame.startswith(_GENERIC_FRAMES):
                incl_counts[frame] += count
    if total == 0:
        return ProfileSummary(0, (), ())

    def top(counter: Counter[str]) -> tuple[FrameShare, ...]:
        return tuple(FrameShare(f, c / total) for f, c in counter.most_common(n))

    return ProfileSummary(total, top(self_counts), top(incl_counts))
