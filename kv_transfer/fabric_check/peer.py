"""The target side of kv-check: serves NIXL regions to initiators over a TCP control socket.

Used two ways: `pdserve kv-check --serve --listen HOST:PORT` on one node (sessions one after
another until Ctrl-C, or one with `--once`), and as the subprocess of a same-node run:
`python -m pdserve.kv_transfer.fabric_check.peer --listen-fd N --once`, where the parent
created the listening socket and passes it down, so no port is raced for.
"""

from __future__ import annotations

import argparse
import itertools
import secrets
import socket
from collections.abc import Callable

from pdserve.kv_transfer.fabric_check import wire
from pdserve.kv_transfer.fabric_check.agents import TargetAgent
from pdserve.kv_transfer.fabric_check.buffers import DEVICES
from pdserve.kv_transfer.fabric_check.units import MAX_BUFFER_BYTES, format_size

SESSION_TIMEOUT_S = 600.0  # a silent initiator for this long ends its session


def _validate(hello: wire.Hello) -> None:
    if hello.device not in DEVICES:
        raise ValueError(f"unknown device {hello.device!r}; this peer supports {DEVICES}")
    if not 0 < hello.num_bytes <= MAX_BUFFER_BYTES:
        raise ValueError(
            f"requested {hello.num_bytes} bytes; this peer allows up to "
            f"{format_size(MAX_BUFFER_BYTES)}"
        )


def serve_session(conn: socket.socket, name: str, log: Callable[[str], None]) -> None:
    """Serve one initiator on `conn` until Bye or disconnect; failures go back as Failure.

    The target agent (and its memory) lives exactly as long as the session.
    """
    conn.settimeout(SESSION_TIMEOUT_S)
    hello = wire.expect(conn, wire.Hello)
    try:
        _validate(hello)
        target = TargetAgent(name, hello.num_bytes, hello.device)
    except Exception as exc:  # reported to the initiator, then re-raised for the log
        wire.send(conn, wire.Failure(f"target could not set up: {exc}"))
        raise
    log(f"session with {hello.initiator}: {format_size(hello.num_bytes)} of {hello.device}")
    try:
        wire.send(conn, target.ready())
        while True:
            message = wire.recv(conn)
            if isinstance(message, wire.Check):
                wire.send(conn, wire.CheckResult(target.check(message.seed, message.num_bytes)))
            elif isinstance(message, wire.Bye):
                return
            else:
                raise wire.WireError(f"unexpected {type(message).__name__} in a session")
    finally:
        target.close()
        log(f"session with {hello.initiator} ended")


def serve(listener: socket.socket, once: bool, log: Callable[[str], None]) -> bool:
    """Accept initiators on `listener` one at a time; return after one session if `once`.

    A failed session is logged (and told to the initiator when it can be); then, unless
    `once`, the next initiator is served. Returns whether the last session succeeded.
    """
    for number in itertools.count():
        conn, address = listener.accept()
        name = f"kvc-target-{secrets.token_hex(4)}-{number}"
        with conn:
            try:
                serve_session(conn, name, log)
                ok = True
            except (wire.WireError, OSError, RuntimeError, ValueError) as exc:
                log(f"session from {address[0]} failed: {exc}")
                ok = False
        if once:
            return ok
    return False  # not reached: itertools.count() never ends


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1)
    return sock


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m pdserve.kv_transfer.fabric_check.peer`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--listen", help="HOST:PORT to listen on")
    where.add_argument("--listen-fd", type=int, help="an inherited listening socket's fd")
    parser.add_argument("--once", action="store_true", help="serve one session, then exit")
    args = parser.parse_args(argv)
    if args.listen_fd is not None:
        listener = socket.socket(fileno=args.listen_fd)
    else:
        listener = listen(*wire.parse_address(args.listen, "0.0.0.0"))
    with listener:
        ok = serve(listener, args.once, lambda line: print(f"kv-check peer: {line}", flush=True))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
