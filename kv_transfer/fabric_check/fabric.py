"""Classify UCX transports into fabrics and check the fabric a user expects (pure).

Fabric classes, best first: "rdma" (InfiniBand/RoCE verbs: rc, ud, dc and their mlx5
variants; EFA's srd), "nvlink" (GPU peer-to-peer through cuda_ipc/rocm_ipc: NVLink or xGMI when
the GPUs have it, PCIe peer-to-peer otherwise: UCX does not say which), "shm" (one node's
shared memory: posix, sysv, cma, knem, xpmem), "tcp" (sockets), then "gpu_copy" (cuda_copy,
gdr_copy, rocm_copy staging), "self" (a process to itself) and "unknown".

"Silent fallback to TCP" means: transports were detected on the data path and none of them is
better than TCP, while something better than TCP was expected (any expectation but "tcp").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

EXPECTATIONS = ("rdma", "nvlink", "shm", "tcp", "any")
BETTER_THAN_TCP = ("rdma", "nvlink", "shm")
_EXACT = {
    "tcp": "tcp",
    "sockcm": "tcp",
    "posix": "shm",
    "sysv": "shm",
    "cma": "shm",
    "knem": "shm",
    "xpmem": "shm",
    "cuda_ipc": "nvlink",
    "rocm_ipc": "nvlink",
    "cuda_copy": "gpu_copy",
    "gdr_copy": "gpu_copy",
    "rocm_copy": "gpu_copy",
    "rocm_gdr": "gpu_copy",
    "self": "self",
    "srd": "rdma",
    "gga": "rdma",
    "ib": "rdma",
    "rdmacm": "rdma",
}
_RDMA_PREFIXES = ("rc", "ud", "dc")
_ORDER = ("rdma", "nvlink", "shm", "tcp", "gpu_copy", "self", "unknown")


@dataclass(frozen=True)
class Verdict:
    """The expectation check of one run.

    `met` is False when the expected fabric is not on the data path, or when nothing was
    detected and a specific fabric was expected (it cannot be confirmed). `warnings` are the
    lines to show the user, most important first; empty when all is as expected.
    """

    expected: str
    fabrics: tuple[str, ...]
    detected: bool
    met: bool
    fallback_to_tcp: bool
    warnings: tuple[str, ...]


def classify(transport: str) -> str:
    """Fabric class of a "tl/device" string such as "rc_mlx5/mlx5_0:1" or "cma/memory"."""
    name = transport.split("/", 1)[0].lower()
    if name in _EXACT:
        return _EXACT[name]
    if name.split("_", 1)[0] in _RDMA_PREFIXES:
        return "rdma"
    return "unknown"


def fabrics_of(transports: Iterable[str]) -> tuple[str, ...]:
    """The distinct fabric classes of `transports`, best first."""
    found = {classify(t) for t in transports}
    return tuple(f for f in _ORDER if f in found)


def evaluate(expected: str, transports: Iterable[str], heuristic: bool) -> Verdict:
    """Check `transports` (the data path; `heuristic` when they are only endpoint lanes)
    against `expected`, one of EXPECTATIONS. Raises ValueError for an unknown expectation."""
    if expected not in EXPECTATIONS:
        raise ValueError(f"unknown fabric expectation {expected!r}; use one of {EXPECTATIONS}")
    listed = tuple(sorted(set(transports)))
    fabrics = fabrics_of(listed)
    detected = bool(listed)
    tcp_only = detected and "tcp" in fabrics and not set(fabrics) & set(BETTER_THAN_TCP)
    fallback = tcp_only and expected != "tcp"
    met = expected == "any" or expected in fabrics
    warnings: list[str] = []
    if fallback and expected in ("rdma", "nvlink"):
        warnings.append(
            f"WARNING: silent fallback to TCP: expected {expected} but the data path uses "
            f"only TCP ({', '.join(listed)}). Check UCX_TLS, UCX_NET_DEVICES and that the "
            "devices are visible inside the container."
        )
    elif fallback:
        warnings.append(
            f"WARNING: the data path uses only TCP ({', '.join(listed)}); shared memory "
            "(cma/posix) or RDMA was not selected."
        )
    elif not met and detected:
        warnings.append(
            f"WARNING: expected {expected} but the data path uses {', '.join(fabrics)} "
            f"({', '.join(listed)})."
            + (
                " On one node UCX prefers shared memory; use --serve/--peer across nodes."
                if expected == "rdma" and "shm" in fabrics
                else ""
            )
        )
    if not detected:
        warnings.append(
            "WARNING: could not detect the UCX transports (UCX logged no protocol selection)"
            + ("; the expectation cannot be confirmed." if expected != "any" else ".")
        )
        met = expected == "any"
    elif heuristic:
        warnings.append(
            "note: transports come from the endpoint's lanes, not from UCX's protocol "
            "selection; they may include control-only lanes (heuristic)."
        )
    return Verdict(expected, fabrics, detected, met, fallback, tuple(warnings))
