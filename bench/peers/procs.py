"""Process records, which processes belong to a setup, and engine vs serving layer (pure).

The harness samples /proc (see `sampler.py`) into `ProcRecord`s; this module decides, with no
I/O, (1) which processes belong to the setup under test (`Scope`, `in_scope`) and (2) whether
each is a vLLM *engine* process or part of the *serving layer* (`classify`).

The classification rule, in order (first match wins):

1. `excluded` — a pid the caller names (the harness itself, the load generator).
2. `engine` — the process itself is an engine: its title (`/proc/PID/comm` or the first
   cmdline word) starts with `VLLM::` (vLLM names its `EngineCore`, `EngineCore_DP0`,
   `Worker`, `Worker_TP0` processes so), or its environment (`/proc/PID/environ`, i.e. as it
   was exec'ed) carries `PDSERVE_ENGINE_ROLE` (pdserve sets it only for the engine processes
   its replicas spawn; the replica's own environ never has it).
3. `engine` — a `multiprocessing.spawn` child (a new engine before it sets its title) whose
   parent is a vLLM front-end: a `vllm.entrypoints` server or a Ray Serve replica actor.
4. `engine` — any ancestor is an engine (workers and helpers an EngineCore starts).
5. `serving` — everything else in scope: routers, API-server front-ends, proxies, Ray's
   controller, proxy and replica actors, raylet, GCS, dashboard and agents, log monitors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

ProcClass = Literal["engine", "serving", "excluded"]
ENGINE_TITLE_PREFIX = "VLLM::"
ENGINE_ENV_MARKER = b"PDSERVE_ENGINE_ROLE="


@dataclass(frozen=True)
class ProcRecord:
    """One process as seen in one sample of /proc.

    `starttime_ticks` (field 22 of /proc/PID/stat) tells a pid apart from a later reuse of it;
    `cpu_ticks` is utime + stime in clock ticks (children not included).
    """

    pid: int
    ppid: int
    starttime_ticks: int
    comm: str
    cmdline: tuple[str, ...]
    engine_env: bool
    cpu_ticks: int

    @property
    def key(self) -> tuple[int, int]:
        """Identity across samples: (pid, start time)."""
        return (self.pid, self.starttime_ticks)

    @property
    def title(self) -> str:
        """A short readable name: the process title, or for a Python process its module or
        script (plus `:PORT` when it has a `--port` argument)."""
        if not self.cmdline or not self.cmdline[0]:
            return self.comm
        first = self.cmdline[0].split("/")[-1]
        if not first.startswith("python"):
            return first[:60]
        args = list(self.cmdline[1:])
        name = first
        if "-m" in args[:-1]:
            name = args[args.index("-m") + 1]
        elif "-c" in args[:-1]:
            name = "python -c " + args[args.index("-c") + 1][:40]
        elif scripts := [a for a in args if not a.startswith("-")]:
            name = scripts[0].split("/")[-1]
        if "--port" in args[:-1]:
            name += f" :{args[args.index('--port') + 1]}"
        return name[:60]


@dataclass(frozen=True)
class StatFields:
    """The fields of /proc/PID/stat that the harness uses."""

    comm: str
    ppid: int
    cpu_ticks: int
    starttime_ticks: int


def parse_stat(text: str) -> StatFields:
    """Parse /proc/PID/stat. `comm` may hold spaces and parentheses, so split at the last ')'.

    Raises ValueError for a malformed line.
    """
    open_at, close_at = text.find("("), text.rfind(")")
    if open_at < 0 or close_at < open_at:
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    rest = text[close_at + 2 :].split()
    # rest[0] is field 3 (state); field N is rest[N - 3].
    if len(rest) < 20:
        raise ValueError(f"/proc/PID/stat line too short: {text[:80]!r}")
    return StatFields(
        comm=text[open_at + 1 : close_at],
        ppid=int(rest[1]),
        cpu_ticks=int(rest[11]) + int(rest[12]),
        starttime_ticks=int(rest[19]),
    )


def parse_cmdline(raw: bytes) -> tuple[str, ...]:
    """/proc/PID/cmdline: NUL-separated; setproctitle may leave one space-joined string."""
    parts = [p.decode(errors="replace") for p in raw.split(b"\0") if p]
    if len(parts) == 1 and " " in parts[0]:
        return tuple(parts[0].split())
    return tuple(parts)


@dataclass(frozen=True)
class Scope:
    """Which processes make up a setup: the trees under `root_pids`, plus, for a Ray setup,
    the trees under every process whose command line names the cluster's GCS port (GCS,
    raylet, dashboard, agents, log monitor, client server; workers are raylet's children)."""

    root_pids: frozenset[int] = frozenset()
    ray_gcs_port: int | None = None


def names_ray_cluster(cmdline: Iterable[str], gcs_port: int) -> bool:
    """True if a command line belongs to the Ray cluster whose GCS listens on `gcs_port`."""
    suffix = f":{gcs_port}"
    for arg in cmdline:
        if arg == f"--gcs_server_port={gcs_port}":
            return True
        for flag in ("--gcs-address=", "--gcs_address=", "--address="):
            if arg.startswith(flag) and arg.endswith(suffix):
                return True
    return False


def is_root(record: ProcRecord, scope: Scope) -> bool:
    """True if `record` starts a tree that belongs to the setup."""
    if record.pid in scope.root_pids:
        return True
    return scope.ray_gcs_port is not None and names_ray_cluster(record.cmdline, scope.ray_gcs_port)


def in_scope(
    records: Mapping[int, ProcRecord], scope: Scope, known: frozenset[int] = frozenset()
) -> set[int]:
    """Pids (of `records`, keyed by pid) that belong to the setup.

    `known`: pids already found to belong in earlier samples (membership is sticky, so a
    process stays in scope after its parent exits and it is re-parented to init).
    """
    member: dict[int, bool] = {}

    def belongs(pid: int, depth: int = 0) -> bool:
        if pid in member:
            return member[pid]
        rec = records.get(pid)
        if rec is None or depth > 64:
            return False
        member[pid] = False  # guards against ppid cycles in a racy sample
        result = pid in known or is_root(rec, scope) or belongs(rec.ppid, depth + 1)
        member[pid] = result
        return result

    return {pid for pid in records if belongs(pid)}


def _is_engine_self(rec: ProcRecord) -> bool:
    first = rec.cmdline[0] if rec.cmdline else ""
    return (
        rec.comm.startswith(ENGINE_TITLE_PREFIX)
        or first.startswith(ENGINE_TITLE_PREFIX)
        or rec.engine_env
    )


def _is_spawn_child(rec: ProcRecord) -> bool:
    return any("multiprocessing.spawn" in a or "spawn_main" in a for a in rec.cmdline)


def is_vllm_frontend(rec: ProcRecord) -> bool:
    """A process that hosts a vLLM engine client (and so may spawn an EngineCore)."""
    joined = " ".join(rec.cmdline)
    return (
        "vllm.entrypoints" in joined
        or rec.comm.startswith("ray::ServeRepli")
        or joined.startswith("ray::ServeReplica")
    )


def classify(
    pid: int, records: Mapping[int, ProcRecord], excluded: frozenset[int] = frozenset()
) -> ProcClass:
    """`engine`, `serving` or `excluded` for one pid of `records` (rule in the module doc)."""
    if pid in excluded:
        return "excluded"
    seen: set[int] = set()
    current = records.get(pid)
    while current is not None and current.pid not in seen:
        seen.add(current.pid)
        parent = records.get(current.ppid)
        if _is_engine_self(current):
            return "engine"
        if parent is not None and _is_spawn_child(current) and is_vllm_frontend(parent):
            return "engine"
        if current.ppid <= 1:
            break
        current = parent
    return "serving"
