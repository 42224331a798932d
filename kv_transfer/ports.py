"""NIXL side-channel ports: one per replica on a node."""

from __future__ import annotations

import socket


def pick_free_port(base_port: int, host: str = "127.0.0.1", num_tries: int = 200) -> int:
    """The first port >= base_port that nothing listens on now.

    Racy by nature: another process may take it before the engine binds it. Replicas on one
    node call it under distinct bases (base + a hash of the replica id), and an engine whose
    bind failed (vLLM then waits forever) is ended by its pool's start deadline
    (pdserve.engine.start_deadline) so that Ray Serve starts a new replica.
    """
    for port in range(base_port, base_port + num_tries):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on {host} in [{base_port}, {base_port + num_tries})")
