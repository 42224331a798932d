"""The control channel between the initiator and the target: typed, versioned messages.

Each frame is a 4-byte big-endian length and a UTF-8 JSON object with "v" (WIRE_VERSION) and
"type". The NIXL agent metadata travels as the opaque blob NIXL produced, base64-encoded.
A session: the initiator sends Hello; the target allocates, registers and answers Ready (or
Failure); the initiator sends any number of Check (the target answers CheckResult), then Bye.
Only control messages use this socket; the measured bytes move over NIXL.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
from dataclasses import dataclass
from typing import Any, TypeVar

WIRE_VERSION = 1
MAX_FRAME_BYTES = 16 * 1024 * 1024
_HEADER = struct.Struct(">I")


class WireError(RuntimeError):
    """A malformed or unexpected message, a version mismatch, or a closed connection."""


class PeerFailure(WireError):
    """The other side answered with Failure: it is alive and said what went wrong."""


@dataclass(frozen=True)
class Hello:
    """Initiator -> target: allocate and register `num_bytes` of `device` memory."""

    num_bytes: int
    device: str
    initiator: str


@dataclass(frozen=True)
class Ready:
    """Target -> initiator: its NIXL metadata and the registered region to read/write."""

    agent_name: str
    metadata: bytes
    address: int
    num_bytes: int
    device_id: int


@dataclass(frozen=True)
class Check:
    """Initiator -> target: verify the first `num_bytes` hold pattern `seed`, then restore the
    target's own pattern (seed 0). Answered with CheckResult."""

    seed: int
    num_bytes: int


@dataclass(frozen=True)
class CheckResult:
    ok: bool


@dataclass(frozen=True)
class Bye:
    """Initiator -> target: the session is over; release everything."""


@dataclass(frozen=True)
class Failure:
    """Either side: the request failed; `message` says why, for the user."""

    message: str


Message = Hello | Ready | Check | CheckResult | Bye | Failure
_TYPES: dict[str, type[Message]] = {
    "hello": Hello,
    "ready": Ready,
    "check": Check,
    "check_result": CheckResult,
    "bye": Bye,
    "failure": Failure,
}
_NAMES = {cls: name for name, cls in _TYPES.items()}
T = TypeVar("T", Hello, Ready, Check, CheckResult, Bye, Failure)


def encode(message: Message) -> bytes:
    """One frame (length header included) for `message`."""
    body: dict[str, Any] = {"v": WIRE_VERSION, "type": _NAMES[type(message)]}
    for key, value in vars(message).items():
        body[key] = base64.b64encode(value).decode() if isinstance(value, bytes) else value
    payload = json.dumps(body).encode()
    return _HEADER.pack(len(payload)) + payload


def decode(payload: bytes) -> Message:
    """The message in one frame's payload (without the header). Raises WireError."""
    try:
        body = json.loads(payload)
        version, kind = body.pop("v"), body.pop("type")
    except (ValueError, KeyError, AttributeError, TypeError) as exc:
        raise WireError(f"malformed kv-check message: {exc}") from exc
    if version != WIRE_VERSION:
        raise WireError(f"kv-check wire version {version} != {WIRE_VERSION}: run the same pdserve")
    if kind not in _TYPES:
        raise WireError(f"unknown kv-check message type {kind!r}")
    if kind == "ready" and isinstance(body.get("metadata"), str):
        body["metadata"] = base64.b64decode(body["metadata"])
    try:
        return _TYPES[kind](**body)
    except TypeError as exc:
        raise WireError(f"bad {kind!r} message: {exc}") from exc


def _recv_exact(sock: socket.socket, num_bytes: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < num_bytes:
        chunk = sock.recv(num_bytes - len(chunks))
        if not chunk:
            raise WireError("kv-check peer closed the connection")
        chunks.extend(chunk)
    return bytes(chunks)


def send(sock: socket.socket, message: Message) -> None:
    """Send one message (blocking)."""
    sock.sendall(encode(message))


def recv(sock: socket.socket) -> Message:
    """Receive one message (blocking, subject to the socket's timeout). Raises WireError."""
    (length,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if length > MAX_FRAME_BYTES:
        raise WireError(f"kv-check message of {length} bytes exceeds {MAX_FRAME_BYTES}")
    return decode(_recv_exact(sock, length))


def expect(sock: socket.socket, kind: type[T]) -> T:
    """Receive one message of type `kind`; a Failure or any other type raises WireError."""
    message = recv(sock)
    if isinstance(message, kind):
        return message
    if isinstance(message, Failure):
        raise PeerFailure(message.message)
    raise WireError(f"expected {kind.__name__}, got {type(message).__name__}")


def parse_address(text: str, default_host: str) -> tuple[str, int]:
    """ "HOST:PORT", ":PORT" or "PORT" -> (host, port). Raises ValueError."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or default_host
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad address {text!r}; use HOST:PORT")
    return host, int(port)
