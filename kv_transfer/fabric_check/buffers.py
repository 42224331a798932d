"""Preallocated transfer buffers: host DRAM (numpy) or GPU VRAM (torch, `--device cuda`).

Each buffer holds a deterministic byte pattern so that a transfer can be verified: byte i of
pattern `seed` is (i + 17 * seed) % 251. Verification samples every ~4 KiB plus the last
byte of the region, which catches a transfer that moved nothing or the wrong region without
reading all of it.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

PATTERN_PERIOD = 251  # prime, so the pattern does not line up with page or block sizes
SAMPLE_STRIDE_BYTES = 4099
DEVICES = ("cpu", "cuda")


class DeviceError(RuntimeError):
    """The requested memory cannot be allocated here (no GPU, unknown device)."""


class Buffer(Protocol):
    """A registered-memory-to-be: contiguous bytes at `address` on `device_id` of `mem_type`."""

    mem_type: str  # NIXL memory type: "DRAM" or "VRAM"
    device_id: int
    address: int
    num_bytes: int

    def fill(self, seed: int, num_bytes: int) -> None: ...
    def clear(self, num_bytes: int) -> None: ...
    def check(self, seed: int, num_bytes: int) -> bool: ...
    def copy_from(self, other: Buffer, num_bytes: int) -> None: ...
    def sync(self) -> None: ...
    def handle(self) -> Any: ...


def _write_pattern(out: np.ndarray[Any, np.dtype[np.uint8]], seed: int) -> None:
    """Write pattern `seed` into `out` in place: one period, then doubling copies."""
    first = min(out.size, PATTERN_PERIOD)
    out[:first] = (np.arange(first, dtype=np.int64) + 17 * seed) % PATTERN_PERIOD
    filled = first  # always a whole number of periods until the last, partial copy
    while filled < out.size:
        step = min(filled, out.size - filled)
        out[filled : filled + step] = out[:step]
        filled += step


def _pattern(seed: int, num_bytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    out = np.empty(num_bytes, dtype=np.uint8)
    _write_pattern(out, seed)
    return out


def _sample_indices(num_bytes: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.unique(np.append(np.arange(0, num_bytes, SAMPLE_STRIDE_BYTES), num_bytes - 1))


def _expected(seed: int, indices: np.ndarray[Any, np.dtype[np.int64]]) -> np.ndarray[Any, Any]:
    return ((indices + 17 * seed) % PATTERN_PERIOD).astype(np.uint8)


class HostBuffer:
    """Page-touched host memory (numpy), so first-touch page faults are not measured."""

    mem_type = "DRAM"
    device_id = 0

    def __init__(self, num_bytes: int, seed: int = 0) -> None:
        self.num_bytes = num_bytes
        self.array = _pattern(seed, num_bytes)
        self.address = int(self.array.ctypes.data)

    def fill(self, seed: int, num_bytes: int) -> None:
        _write_pattern(self.array[:num_bytes], seed)

    def clear(self, num_bytes: int) -> None:
        self.array[:num_bytes] = 0

    def check(self, seed: int, num_bytes: int) -> bool:
        indices = _sample_indices(num_bytes)
        return bool(np.array_equal(self.array[indices], _expected(seed, indices)))

    def copy_from(self, other: Buffer, num_bytes: int) -> None:
        np.copyto(self.array[:num_bytes], other.handle()[:num_bytes])

    def sync(self) -> None:
        """Host copies are synchronous."""

    def handle(self) -> Any:
        return self.array


class CudaBuffer:
    """GPU memory (torch uint8 tensor) on the current CUDA device. Not testable on CPU-only
    machines; needs a CUDA build of torch."""

    mem_type = "VRAM"

    def __init__(self, num_bytes: int, seed: int = 0) -> None:
        import torch

        if not torch.cuda.is_available():
            raise DeviceError("--device cuda needs a CUDA GPU and a CUDA build of torch")
        self.num_bytes = num_bytes
        self.tensor = torch.from_numpy(_pattern(seed, num_bytes)).to("cuda")
        self.device_id = int(self.tensor.device.index or 0)
        self.address = int(self.tensor.data_ptr())

    def fill(self, seed: int, num_bytes: int) -> None:
        import torch

        self.tensor[:num_bytes].copy_(torch.from_numpy(_pattern(seed, num_bytes)))

    def clear(self, num_bytes: int) -> None:
        self.tensor[:num_bytes].zero_()

    def check(self, seed: int, num_bytes: int) -> bool:
        import torch

        indices = _sample_indices(num_bytes)
        got = self.tensor[torch.from_numpy(indices).to(self.tensor.device)].cpu().numpy()
        return bool(np.array_equal(got, _expected(seed, indices)))

    def copy_from(self, other: Buffer, num_bytes: int) -> None:
        self.tensor[:num_bytes].copy_(other.handle()[:num_bytes], non_blocking=True)

    def sync(self) -> None:
        import torch

        torch.cuda.synchronize(self.device_id)

    def handle(self) -> Any:
        return self.tensor


def make_buffer(device: str, num_bytes: int, seed: int = 0) -> Buffer:
    """A buffer of `num_bytes` on `device` ("cpu" or "cuda") filled with pattern `seed`."""
    if device == "cpu":
        return HostBuffer(num_bytes, seed)
    if device == "cuda":
        return CudaBuffer(num_bytes, seed)
    raise DeviceError(f"unknown device {device!r}; use one of {DEVICES}")


def time_memcpy(dst: Buffer, src: Buffer, num_bytes: int, iterations: int) -> list[float]:
    """Seconds per copy of `num_bytes` from `src` to `dst` (same device), `iterations` times."""
    samples: list[float] = []
    for _ in range(iterations):
        start = time.perf_counter()
        dst.copy_from(src, num_bytes)
        dst.sync()
        samples.append(time.perf_counter() - start)
    return samples
