"""How the initiator reaches its target: over TCP (another node, or a subprocess on this one)
or directly (`--in-process`). Every link has `open(hello) -> Ready`, `check(seed, num_bytes)`
and `close()`; `close()` is safe to call after a failure and releases the target.
"""

from __future__ import annotations

import pathlib
import secrets
import socket
import subprocess
import sys
from typing import Protocol

from pdserve.kv_transfer.fabric_check import wire
from pdserve.kv_transfer.fabric_check.agents import TargetAgent

CONNECT_TIMEOUT_S = 30.0
READY_TIMEOUT_S = 180.0  # the peer imports NIXL and allocates up to the largest size first
CHECK_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 15.0
LOG_TAIL_BYTES = 4000


class PeerError(RuntimeError):
    """The target could not be reached, failed, or answered out of protocol."""


class PeerLink(Protocol):
    def open(self, hello: wire.Hello) -> wire.Ready: ...
    def check(self, seed: int, num_bytes: int) -> bool: ...
    def close(self) -> None: ...


class SocketPeer:
    """A target behind a TCP control socket (`--peer HOST:PORT`, or a spawned subprocess)."""

    def __init__(self, host: str, port: int) -> None:
        self.address = f"{host}:{port}"
        try:
            self.sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            raise PeerError(f"cannot reach the kv-check peer at {self.address}: {exc}") from exc
        self._open = False

    def _fail(self, exc: Exception) -> PeerError:
        return PeerError(f"kv-check peer {self.address}: {exc}")

    def open(self, hello: wire.Hello) -> wire.Ready:
        try:
            self.sock.settimeout(READY_TIMEOUT_S)
            wire.send(self.sock, hello)
            ready = wire.expect(self.sock, wire.Ready)
        except (OSError, wire.WireError) as exc:
            raise self._fail(exc) from exc
        self._open = True
        return ready

    def check(self, seed: int, num_bytes: int) -> bool:
        try:
            self.sock.settimeout(CHECK_TIMEOUT_S)
            wire.send(self.sock, wire.Check(seed, num_bytes))
            return bool(wire.expect(self.sock, wire.CheckResult).ok)
        except (OSError, wire.WireError) as exc:
            raise self._fail(exc) from exc

    def close(self) -> None:
        try:
            if self._open:
                wire.send(self.sock, wire.Bye())
        except OSError:
            pass  # the peer is already gone; closing our end is all that is left
        finally:
            self.sock.close()


class SpawnedPeer(SocketPeer):
    """A target in a child process on this node (`python -m ...fabric_check.peer`): the
    transfer crosses a process boundary as it does between prefill and decode engines.
    The child's output goes to `log_path`; its tail is added to errors."""

    def __init__(self, env: dict[str, str], log_path: pathlib.Path) -> None:
        from pdserve.kv_transfer.fabric_check.peer import listen

        self.log_path = log_path
        with listen("127.0.0.1", 0) as listener, log_path.open("wb") as log:
            command = [sys.executable, "-m", "pdserve.kv_transfer.fabric_check.peer"]
            fd = listener.fileno()
            self.process = subprocess.Popen(
                [*command, "--listen-fd", str(fd), "--once"],
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
            host, port = listener.getsockname()[:2]
            try:
                super().__init__(host, port)  # queued in the backlog until the child accepts
            except PeerError:
                self.process.kill()
                self.process.wait()
                raise

    def _fail(self, exc: Exception) -> PeerError:
        if isinstance(exc, wire.PeerFailure):
            return PeerError(f"kv-check peer process: {exc}")
        tail = self.log_path.read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace")
        code = self.process.poll()
        state = "running" if code is None else f"exited with {code}"
        return PeerError(f"kv-check peer process ({state}): {exc}\n{tail}".rstrip())

    def close(self) -> None:
        super().close()
        try:
            self.process.wait(timeout=EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()  # our own child, by its handle
            self.process.wait()


class LocalPeer:
    """A target agent in this very process (`--in-process`): no process boundary, so UCX may
    pick different transports than between two engines; a diagnostic, not the real path."""

    def __init__(self) -> None:
        self.target: TargetAgent | None = None

    def open(self, hello: wire.Hello) -> wire.Ready:
        name = f"kvc-target-{secrets.token_hex(4)}"
        self.target = TargetAgent(name, hello.num_bytes, hello.device)
        return self.target.ready()

    def check(self, seed: int, num_bytes: int) -> bool:
        if self.target is None:
            raise PeerError("check before open")
        return bool(self.target.check(seed, num_bytes))

    def close(self) -> None:
        if self.target is not None:
            self.target.close()
            self.target = None
