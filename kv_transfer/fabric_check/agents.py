"""The NIXL adapter: a target agent (owns the region, like a prefill engine) and an initiator
agent (reads or writes it, like a decode engine with vLLM's NixlConnector, which pulls).

Both use NIXL's UCX backend. The target runs NIXL's progress thread (so transports that need
the remote side to make progress, such as TCP, complete without help); the initiator has no
progress thread and busy-polls `check_xfer_state`, so a measured latency is the transfer, not
a sleep in a polling loop. Call `close()` on both; it deregisters memory and releases handles.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pdserve.kv_transfer.fabric_check.buffers import Buffer, make_buffer
from pdserve.kv_transfer.fabric_check.wire import Ready

OPERATIONS = ("READ", "WRITE")
BACKEND = "UCX"


class TransferError(RuntimeError):
    """NIXL reported an error for a transfer, or a transfer moved the wrong bytes."""


@contextlib.contextmanager
def nixl_errors(what: str) -> Iterator[None]:
    """Turn NIXL's binding exceptions (nixlBackendError, nixlRemoteDisconnectError, ...; they
    share no base class but Exception) raised in the block into TransferError."""
    from nixl import _bindings

    kinds = tuple(
        getattr(_bindings, n)
        for n in dir(_bindings)
        if n.startswith("nixl") and n.endswith("Error")
    )
    try:
        yield
    except kinds as exc:
        raise TransferError(f"{what}: {type(exc).__name__} {exc}".rstrip()) from exc


def _new_agent(name: str, progress_thread: bool) -> Any:
    from nixl._api import nixl_agent, nixl_agent_config

    config = nixl_agent_config(enable_prog_thread=progress_thread, backends=[BACKEND])
    agent = nixl_agent(name, config)
    if BACKEND not in agent.backends:
        raise TransferError(f"NIXL could not create its {BACKEND} backend (plugins missing?)")
    return agent


def _register(agent: Any, buffer: Buffer) -> Any:
    region = [(buffer.address, buffer.num_bytes, buffer.device_id, "")]
    return agent.register_memory(region, buffer.mem_type)


class TargetAgent:
    """Owns `num_bytes` of `device` memory holding pattern 0, registered with NIXL.

    Created per session by the serving side (`peer.py`) or in-process (`--in-process`).
    """

    def __init__(self, name: str, num_bytes: int, device: str) -> None:
        self.buffer = make_buffer(device, num_bytes, seed=0)  # before the agent: CUDA context
        self.name = name
        with nixl_errors("NIXL target setup failed"):
            self.agent = _new_agent(name, progress_thread=True)
            self._registered = _register(self.agent, self.buffer)

    def ready(self) -> Ready:
        """What the initiator needs: NIXL metadata (after registration) and the region."""
        return Ready(
            agent_name=self.name,
            metadata=self.agent.get_agent_metadata(),
            address=self.buffer.address,
            num_bytes=self.buffer.num_bytes,
            device_id=self.buffer.device_id,
        )

    def check(self, seed: int, num_bytes: int) -> bool:
        """Whether the region starts with pattern `seed` (after a WRITE); then restore 0."""
        ok = bool(self.buffer.check(seed, num_bytes))
        self.buffer.fill(0, num_bytes)
        return ok

    def close(self) -> None:
        with nixl_errors("NIXL target cleanup failed"):
            self.agent.deregister_memory(self._registered)


class InitiatorAgent:
    """Reads from / writes to a target's region, one prepared descriptor per transfer size.

    `sizes` are the transfer sizes (each at offset 0 of both regions); `remote` is the target's
    Ready. The transfer buffer holds pattern 1 until a READ overwrites it.
    """

    def __init__(self, name: str, device: str, remote: Ready, sizes: Sequence[int]) -> None:
        if max(sizes) > remote.num_bytes:
            raise TransferError(f"the target registered only {remote.num_bytes} bytes")
        self.sizes = tuple(sizes)
        self.buffer = make_buffer(device, max(sizes), seed=1)
        mem = self.buffer.mem_type
        local = [(self.buffer.address, size, self.buffer.device_id) for size in self.sizes]
        far = [(remote.address, size, remote.device_id) for size in self.sizes]
        with nixl_errors("NIXL initiator setup failed"):
            self.agent = _new_agent(name, progress_thread=False)
            self._registered = _register(self.agent, self.buffer)
            self.remote_name = self.agent.add_remote_agent(remote.metadata)
            if isinstance(self.remote_name, bytes):
                self.remote_name = self.remote_name.decode()
            self._local = self.agent.prep_xfer_dlist("NIXL_INIT_AGENT", local, mem)
            self._remote = self.agent.prep_xfer_dlist(self.remote_name, far, mem)

    def connect(self) -> None:
        """Establish the UCX connection now, so the first timed transfer does not pay for it."""
        with nixl_errors("NIXL could not connect to the target"):
            self.agent.make_connection(self.remote_name)

    def time_transfers(
        self, op: str, num_bytes: int, iterations: int, on_each: Callable[[], None]
    ) -> list[float]:
        """Seconds per `op` ("READ"/"WRITE") of `num_bytes`, `iterations` times back to back.

        One transfer handle is prepared and posted `iterations` times; each is timed from
        post to DONE. Raises TransferError when NIXL reports ERR.
        """
        index = self.sizes.index(num_bytes)
        with nixl_errors(f"NIXL could not prepare a {op} of {num_bytes} bytes"):
            handle = self.agent.make_prepped_xfer(op, self._local, [index], self._remote, [index])
        samples: list[float] = []
        try:
            with nixl_errors(f"NIXL {op} of {num_bytes} bytes failed"):
                for _ in range(iterations):
                    start = time.perf_counter()
                    state = self.agent.transfer(handle)
                    while state == "PROC":
                        state = self.agent.check_xfer_state(handle)
                    elapsed = time.perf_counter() - start
                    if state != "DONE":
                        raise TransferError(f"NIXL {op} of {num_bytes} bytes failed ({state})")
                    samples.append(elapsed)
                    on_each()
        except BaseException:
            with contextlib.suppress(Exception):  # report the transfer's error, not this one
                handle.release()
            raise
        with nixl_errors("NIXL could not release a transfer handle"):
            handle.release()
        return samples

    def close(self) -> None:
        with nixl_errors("NIXL initiator cleanup failed"):
            self._local.release()
            self._remote.release()
            self.agent.remove_remote_agent(self.remote_name)
            self.agent.deregister_memory(self._registered)
