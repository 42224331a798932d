"""One kv-check run: reach the target, measure NIXL and memcpy per size, detect transports.

`run_check` is the only entry point; the CLI calls it once per process. It must run before
any NIXL agent exists in this process: UCX reads its logging variables (which transport
detection depends on) when the first agent loads it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import pathlib
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pdserve.kv_transfer.fabric_check import transports as tp
from pdserve.kv_transfer.fabric_check.agents import InitiatorAgent, TransferError
from pdserve.kv_transfer.fabric_check.buffers import Buffer, make_buffer, time_memcpy
from pdserve.kv_transfer.fabric_check.fabric import evaluate
from pdserve.kv_transfer.fabric_check.links import LocalPeer, PeerLink, SocketPeer, SpawnedPeer
from pdserve.kv_transfer.fabric_check.report import Report, build_row, data_path
from pdserve.kv_transfer.fabric_check.stats import TimingSummary, summarize
from pdserve.kv_transfer.fabric_check.units import auto_iterations, format_size
from pdserve.kv_transfer.fabric_check.wire import Hello

MODES = ("same-node", "in-process", "two-node")
QUIET_NIXL = {"NIXL_LOG_LEVEL": "WARN"}  # unless the user set it: NIXL logs INFO to stdout

Progress = Callable[[int, str], None]  # (steps just completed, what is being measured)


@dataclass(frozen=True)
class CheckOptions:
    """What to measure. `iterations` None means `auto_iterations` per size; `peer` is set in
    two-node mode only; `ucx_log` keeps the initiator's raw UCX log at that path."""

    sizes: tuple[int, ...]
    iterations: int | None
    warmup: int
    ops: tuple[str, ...]
    device: str
    mode: str
    expected: str
    peer: tuple[str, int] | None = None
    ucx_log: pathlib.Path | None = None

    def iterations_for(self, num_bytes: int) -> int:
        return self.iterations if self.iterations is not None else auto_iterations(num_bytes)

    def total_steps(self) -> int:
        """Transfers and copies the run will make (warm-ups included), for a progress bar."""
        per = [(self.warmup + self.iterations_for(s)) * (len(self.ops) + 1) for s in self.sizes]
        return sum(per)


@contextlib.contextmanager
def _environment(overrides: dict[str, str]) -> Iterator[None]:
    """Set `overrides` in os.environ for the block (UCX and NIXL read them at load time)."""
    saved = {key: os.environ.get(key) for key in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _flush_c_stdio() -> None:
    """UCX writes its log through C stdio with a buffer; flush it before reading the file."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


def _on_exit(close: Callable[[], None]) -> Callable[..., bool]:
    """An ExitStack exit callback: after success, `close` errors are raised; after a failure
    they are suppressed so the first error (the one that explains the failure) is reported."""

    def exit_(exc_type: type[BaseException] | None, *_: object) -> bool:
        if exc_type is None:
            close()
        else:
            with contextlib.suppress(Exception):
                close()
        return False

    return exit_


def _open_link(options: CheckOptions, workdir: pathlib.Path) -> PeerLink:
    if options.mode == "two-node":
        if options.peer is None:
            raise ValueError("two-node mode needs a peer address")
        return SocketPeer(*options.peer)
    if options.mode == "in-process":
        return LocalPeer()
    env = {**QUIET_NIXL, **os.environ}
    return SpawnedPeer(env, workdir / "peer.log")


def _measure_size(
    options: CheckOptions,
    initiator: InitiatorAgent,
    link: PeerLink,
    copy_buffers: tuple[Buffer, Buffer],
    num_bytes: int,
    progress: Progress,
) -> tuple[dict[str, TimingSummary], TimingSummary]:
    """NIXL summaries per op, then a memcpy of the same size between `copy_buffers`
    (source, destination) right after, so both see the same machine load. Verifies the
    bytes each NIXL operation moved; raises TransferError if they are wrong."""
    count, warmup, label = options.iterations_for(num_bytes), options.warmup, format_size(num_bytes)
    nixl: dict[str, TimingSummary] = {}
    for op in options.ops:
        if op == "READ":
            initiator.buffer.clear(num_bytes)
        else:
            initiator.buffer.fill(1, num_bytes)
        step = functools.partial(progress, 1, f"NIXL {op} {label}")
        initiator.time_transfers(op, num_bytes, warmup, step)
        samples = initiator.time_transfers(op, num_bytes, count, step)
        ok = initiator.buffer.check(0, num_bytes) if op == "READ" else link.check(1, num_bytes)
        if not ok:
            raise TransferError(f"NIXL {op} of {label} completed but moved the wrong bytes")
        nixl[op] = summarize(num_bytes, samples)
    src, dst = copy_buffers
    time_memcpy(dst, src, num_bytes, warmup)
    progress(warmup, f"memcpy {label}")
    copies = time_memcpy(dst, src, num_bytes, count)
    progress(count, f"memcpy {label}")
    return nixl, summarize(num_bytes, copies)


def run_check(options: CheckOptions, progress: Progress) -> Report:
    """Measure, detect transports, check the expectation; returns the report.

    Raises PeerError (links.py) when the target fails, TransferError when NIXL reports an
    error or moves the wrong bytes. Leaves no process or registration behind.
    """
    started = time.perf_counter()
    name = f"kvc-initiator-{secrets.token_hex(4)}"  # unique; UCX logs it (truncated at 31)
    sizes = options.sizes
    with tempfile.TemporaryDirectory(prefix="pdserve-kv-check-") as tmp:
        workdir = pathlib.Path(tmp)
        log_path = (options.ucx_log or workdir / "ucx-initiator.log").absolute()
        env = {**QUIET_NIXL, **os.environ, **tp.detection_env(str(log_path), dict(os.environ))}
        results: list[tuple[int, dict[str, TimingSummary], TimingSummary]] = []
        with contextlib.ExitStack() as stack:
            link = _open_link(options, workdir)  # a spawned peer gets the user's environment
            stack.push(_on_exit(link.close))
            with _environment(env):  # before this process's first NIXL agent loads UCX
                ready = link.open(Hello(max(sizes), options.device, name))
                initiator = InitiatorAgent(name, options.device, ready, sizes)
            stack.push(_on_exit(initiator.close))
            initiator.connect()
            source_buffer = make_buffer(options.device, max(sizes), seed=2)
            copy_buffers = (source_buffer, make_buffer(options.device, max(sizes), seed=3))
            for num_bytes in sizes:
                nixl, memcpy = _measure_size(
                    options, initiator, link, copy_buffers, num_bytes, progress
                )
                results.append((num_bytes, nixl, memcpy))
        _flush_c_stdio()
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
    log = tp.parse_ucx_log(text)
    rows = tuple(
        build_row(op, nixl[op], memcpy, tp.data_path_transports(log, name, op, num_bytes))
        for num_bytes, nixl, memcpy in results
        for op in options.ops
    )
    lanes = tp.endpoint_transports(log, name)
    selected = data_path(rows)
    if selected:
        source = tp.SOURCE_PROTO_INFO
    else:
        source = tp.SOURCE_ENDPOINT_LANES if lanes else tp.SOURCE_NONE
    shown = selected or lanes
    return Report(
        mode=options.mode,
        device=options.device,
        peer=f"{options.peer[0]}:{options.peer[1]}" if options.peer else None,
        rows=rows,
        transports=shown,
        transport_detection=source,
        endpoint_transports=lanes,
        verdict=evaluate(options.expected, shown, heuristic=source == tp.SOURCE_ENDPOINT_LANES),
        ucx_version=log.version,
        duration_s=time.perf_counter() - started,
    )
