"""Adapter: sample a setup's processes from /proc in a background thread.

Who calls it: the harness, once per measured phase (`with ProcessSampler(scope) as s: ...`).
Every `interval_s` it lists /proc, finds the setup's processes (`procs.in_scope`), reads their
stat, cmdline and (once per process) environ, and feeds a `CpuLedger`. Processes known to be
outside the setup are not re-read, so a sample costs about a millisecond.
"""

from __future__ import annotations

import os
import pathlib
import threading
from types import TracebackType

from pdserve.bench.peers.cpu import CpuLedger, CpuTotals
from pdserve.bench.peers.procs import (
    ENGINE_ENV_MARKER,
    ProcRecord,
    Scope,
    in_scope,
    parse_cmdline,
    parse_stat,
)

PROC = pathlib.Path("/proc")


def read_record(pid: int, environ_cache: dict[tuple[int, int], bool]) -> ProcRecord | None:
    """One process from /proc, or None if it is gone or unreadable."""
    base = PROC / str(pid)
    try:
        stat = parse_stat((base / "stat").read_text())
        cmdline = parse_cmdline((base / "cmdline").read_bytes())
    except (OSError, ValueError):
        return None
    key = (pid, stat.starttime_ticks)
    if key not in environ_cache:
        try:
            environ_cache[key] = ENGINE_ENV_MARKER in (base / "environ").read_bytes()
        except OSError:
            environ_cache[key] = False
    return ProcRecord(
        pid=pid,
        ppid=stat.ppid,
        starttime_ticks=stat.starttime_ticks,
        comm=stat.comm,
        cmdline=cmdline,
        engine_env=environ_cache[key],
        cpu_ticks=stat.cpu_ticks,
    )


def list_pids() -> list[int]:
    """Every pid in /proc now."""
    return [int(p) for p in os.listdir(PROC) if p.isdigit()]


def scope_records(scope: Scope) -> dict[int, ProcRecord]:
    """A one-off snapshot: the setup's processes now, by pid (for tear-down and checks)."""
    cache: dict[tuple[int, int], bool] = {}
    records = {}
    for pid in list_pids():
        rec = read_record(pid, cache)
        if rec is not None:
            records[pid] = rec
    members = in_scope(records, scope)
    return {pid: records[pid] for pid in members}


class ProcessSampler:
    """Samples a setup's processes until closed; `open_window()` starts the measured window."""

    def __init__(self, scope: Scope, interval_s: float = 0.2) -> None:
        self._scope = scope
        self._interval_s = interval_s
        self._ledger = CpuLedger(ticks_per_s=float(os.sysconf("SC_CLK_TCK")))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="peers-sampler", daemon=True)
        self._members: set[tuple[int, int]] = set()
        self._outsiders: set[tuple[int, int]] = set()
        self._environ: dict[tuple[int, int], bool] = {}
        self._starts: dict[int, int] = {}
        self.num_samples = 0

    def __enter__(self) -> ProcessSampler:
        self.sample_once()
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop sampling (takes one last sample first)."""
        if not self._stop.is_set():
            self._stop.set()
            if self._thread.is_alive():
                self._thread.join(timeout=5)
            self.sample_once()

    def open_window(self) -> None:
        """Sample now and make this moment the start of the measured window."""
        with self._lock:
            self._sample_locked()
            self._ledger.open()

    def totals(self, excluded: frozenset[int] = frozenset()) -> CpuTotals:
        """CPU per class since `open_window()` (sampling goes on)."""
        with self._lock:
            return self._ledger.totals(excluded)

    def sample_once(self) -> None:
        """Take one sample now."""
        with self._lock:
            self._sample_locked()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.sample_once()

    def _sample_locked(self) -> None:
        records: dict[int, ProcRecord] = {}
        # Outsiders are not re-read while their pid stays listed; a pid that disappears is
        # forgotten, so its reuse by a new process is read afresh.
        listed = list_pids()
        listed_set = set(listed)
        for gone in [pid for pid in self._starts if pid not in listed_set]:
            del self._starts[gone]
        for pid in listed:
            start = self._starts.get(pid)
            if start is not None and (pid, start) in self._outsiders:
                continue
            rec = read_record(pid, self._environ)
            if rec is None:
                continue
            self._starts[pid] = rec.starttime_ticks
            if rec.key in self._outsiders:
                continue
            records[pid] = rec
        # A new process may be the child of a member that has since exited (re-parented to
        # init): members stay members, so pass them as `known`.
        known = frozenset(pid for pid, rec in records.items() if rec.key in self._members)
        members = in_scope(records, self._scope, known)
        for pid, rec in records.items():
            (self._members if pid in members else self._outsiders).add(rec.key)
        self._ledger.sample(records[pid] for pid in members)
        self.num_samples += 1
