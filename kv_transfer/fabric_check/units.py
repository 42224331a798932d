"""Transfer sizes: parsing ("4K", "16MiB"), formatting, and how many iterations each size gets.

Pure functions; sizes are bytes, unit suffixes are binary (K = 1024).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
# 4 KiB .. 256 MiB in powers of 4: 4K, 16K, 64K, 256K, 1M, 4M, 16M, 64M, 256M.
DEFAULT_SIZES_BYTES: tuple[int, ...] = tuple(4 * KIB * 4**i for i in range(9))
# Largest buffer one side may allocate (the serving side enforces it against remote requests).
MAX_BUFFER_BYTES = 4 * GIB
# Auto iterations: about this many bytes per size and operation, clamped to the bounds below.
AUTO_BUDGET_BYTES = 256 * MIB
AUTO_MIN_ITERATIONS = 10
AUTO_MAX_ITERATIONS = 100

_UNITS = {"": 1, "B": 1, "K": KIB, "M": MIB, "G": GIB}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)


class SizeError(ValueError):
    """A size string that cannot be parsed, or a size outside the allowed range."""


def parse_size(text: str) -> int:
    """Bytes for "4096", "4K", "4KiB", "4kb", "16M", "1G" (binary units). Raises SizeError."""
    match = _SIZE_RE.match(text)
    if match is None:
        raise SizeError(f"cannot parse size {text!r}; use e.g. 4K, 16M, 1G or a byte count")
    value = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if value <= 0:
        raise SizeError(f"size {text!r} must be positive")
    if value > MAX_BUFFER_BYTES:
        raise SizeError(f"size {text!r} exceeds the maximum of {format_size(MAX_BUFFER_BYTES)}")
    return value


def parse_sizes(text: str) -> tuple[int, ...]:
    """Sorted, de-duplicated bytes for a comma-separated list such as "4K,1M,256M"."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise SizeError("--sizes needs at least one size, e.g. 4K,1M,256M")
    return tuple(sorted({parse_size(p) for p in parts}))


def cap_sizes(sizes: Iterable[int], max_bytes: int | None) -> tuple[int, ...]:
    """The sizes not above `max_bytes` (all of them when None); raises SizeError if none is left."""
    kept = tuple(s for s in sizes if max_bytes is None or s <= max_bytes)
    if not kept:
        raise SizeError(f"no transfer size is at or below --max-size {format_size(max_bytes or 0)}")
    return kept


def format_size(num_bytes: int) -> str:
    """Short binary form: 4096 -> "4K", 268435456 -> "256M"; non-multiples as "1000B"."""
    for suffix, unit in (("G", GIB), ("M", MIB), ("K", KIB)):
        if num_bytes >= unit and num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return f"{num_bytes}B"


def auto_iterations(num_bytes: int) -> int:
    """Timed iterations for one size when --iterations is not given: fewer for big sizes.

    About AUTO_BUDGET_BYTES moved per size and operation, at least AUTO_MIN_ITERATIONS (so p50
    and p99 mean something) and at most AUTO_MAX_ITERATIONS (small sizes are cheap anyway).
    """
    return max(AUTO_MIN_ITERATIONS, min(AUTO_MAX_ITERATIONS, AUTO_BUDGET_BYTES // num_bytes))
