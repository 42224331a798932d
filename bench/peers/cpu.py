"""CPU accounting over a measurement window from repeated /proc samples (pure).

`CpuLedger` is fed one sample at a time (the in-scope `ProcRecord`s of that moment). It keeps,
per process identity (pid, start time), the CPU ticks at its first sighting in the window
(the baseline; 0 for a process born after the window opened) and at its last sighting. A
process that exits keeps its last sampled value, so at most one sampling interval of its CPU
is lost; CPU of children that exited and were reaped is not read from the parent's
cutime/cstime (that would double-count children sampled while alive).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pdserve.bench.peers.procs import ProcClass, ProcRecord, classify


@dataclass(frozen=True)
class ProcessCpu:
    """CPU one process spent inside the window, with its class and a readable name."""

    pid: int
    name: str
    proc_class: ProcClass
    cpu_s: float
    exited: bool


@dataclass(frozen=True)
class CpuTotals:
    """CPU seconds per class over the window, and the per-process breakdown (largest first)."""

    serving_s: float
    engine_s: float
    excluded_s: float
    num_processes: int
    num_exited: int
    processes: tuple[ProcessCpu, ...]

    def top(self, proc_class: ProcClass, n: int = 8) -> list[ProcessCpu]:
        """The `n` biggest consumers of one class."""
        return [p for p in self.processes if p.proc_class == proc_class][:n]


@dataclass
class CpuLedger:
    """Accumulates samples; `opened` tells whether the window's baseline was taken.

    Call `sample()` for every /proc sample (before and during the window): samples before
    `open()` only teach it the processes and their baselines. `open()` marks the start of the
    window: every known process's current ticks become its baseline.
    """

    ticks_per_s: float
    _first: dict[tuple[int, int], int] = field(default_factory=dict)
    _last: dict[tuple[int, int], ProcRecord] = field(default_factory=dict)
    _alive: set[tuple[int, int]] = field(default_factory=set)
    opened: bool = False

    def open(self) -> None:
        """Start the window: the current value of every live process is its baseline."""
        self._first = {key: rec.cpu_ticks for key, rec in self._last.items() if key in self._alive}
        self._last = {key: rec for key, rec in self._last.items() if key in self._alive}
        self.opened = True

    def sample(self, records: Iterable[ProcRecord]) -> None:
        """Record one sample: the in-scope processes alive now."""
        alive: set[tuple[int, int]] = set()
        for rec in records:
            key = rec.key
            alive.add(key)
            if key not in self._first:
                # Seen for the first time: before the window its whole CPU so far is
                # baseline; once the window is open it was born inside it.
                self._first[key] = 0 if self.opened else rec.cpu_ticks
            self._last[key] = rec
        self._alive = alive

    def totals(self, excluded: frozenset[int] = frozenset()) -> CpuTotals:
        """CPU seconds per class since `open()` (all samples if never opened)."""
        by_pid = {key[0]: rec for key, rec in sorted(self._last.items(), key=lambda kv: kv[0])}
        per_class: dict[str, float] = {"engine": 0.0, "serving": 0.0, "excluded": 0.0}
        rows = []
        for key, rec in self._last.items():
            spent = max(0, rec.cpu_ticks - self._first.get(key, 0)) / self.ticks_per_s
            proc_class = classify(rec.pid, by_pid, excluded)
            per_class[proc_class] += spent
            rows.append(
                ProcessCpu(
                    pid=rec.pid,
                    name=rec.title,
                    proc_class=proc_class,
                    cpu_s=spent,
                    exited=key not in self._alive,
                )
            )
        rows.sort(key=lambda r: r.cpu_s, reverse=True)
        return CpuTotals(
            serving_s=per_class["serving"],
            engine_s=per_class["engine"],
            excluded_s=per_class["excluded"],
            num_processes=len(rows),
            num_exited=sum(r.exited for r in rows),
            processes=tuple(rows),
        )


def ms_per_request(cpu_s: float, num_requests: int) -> float | None:
    """CPU milliseconds per request; None when no request was served."""
    if num_requests <= 0:
        return None
    return 1000.0 * cpu_s / num_requests
