"""`IntMap`: a 64-bit int → 64-bit int map on packed arrays (numba kernels; pure).

What the KV-event translator (router/kv_events.py) keeps per engine: the engine's block hash →
the router's chained hash, one entry per block the engine holds. A Python dict costs about
100 bytes an entry (two int objects and a slot); this costs 17 bytes a slot (key, value, a
used flag) at 57-85 % load, i.e. 20-30 bytes an entry. Open addressing with linear probing
and backward-shift deletion; batch operations, one kernel call per KV event.
Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba as nb
import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_U32 = np.uint64(32)
_MAX_LOAD = 0.85
_GROWTH = 1.5


@nb.njit(cache=True, inline="always")
def _home(key: int, size: int) -> np.int64:
    x = np.uint64(key) * _GOLDEN
    return np.int64(((x >> _U32) * np.uint64(size)) >> _U32)


@nb.njit(cache=True)
def _slot(keys: np.ndarray, used: np.ndarray, key: int) -> int:
    size = keys.shape[0]
    s = _home(key, size)
    while used[s]:
        if keys[s] == key:
            return s
        s += 1
        if s == size:
            s = 0
    return -1 - s  # not found: -1 - the empty slot where it would go


@nb.njit(cache=True)
def _put(keys: np.ndarray, vals: np.ndarray, used: np.ndarray, k: np.ndarray, v: np.ndarray) -> int:
    """Insert or overwrite; returns how many keys were new."""
    added = 0
    for i in range(k.shape[0]):
        s = _slot(keys, used, k[i])
        if s < 0:
            s = -1 - s
            used[s] = True
            keys[s] = k[i]
            added += 1
        vals[s] = v[i]
    return added


@nb.njit(cache=True)
def _get(keys: np.ndarray, vals: np.ndarray, used: np.ndarray, key: int) -> tuple[bool, int]:
    s = _slot(keys, used, key)
    if s < 0:
        return False, 0
    return True, vals[s]


@nb.njit(cache=True)
def _pop(
    keys: np.ndarray, vals: np.ndarray, used: np.ndarray, k: np.ndarray, out: np.ndarray
) -> int:
    """Remove each key of `k` present; write their values into `out`; return how many."""
    size = keys.shape[0]
    n = 0
    for q in range(k.shape[0]):
        i = _slot(keys, used, k[q])
        if i < 0:
            continue
        out[n] = vals[i]
        n += 1
        j = i
        while True:  # backward-shift deletion
            j += 1
            if j == size:
                j = 0
            if not used[j]:
                break
            h = _home(keys[j], size)
            if (i <= j and (h <= i or h > j)) or (i > j and (h <= i and h > j)):
                keys[i] = keys[j]
                vals[i] = vals[j]
                i = j
        used[i] = False
    return n


@nb.njit(cache=True)
def _rehash(
    keys: np.ndarray,
    vals: np.ndarray,
    used: np.ndarray,
    nk: np.ndarray,
    nv: np.ndarray,
    nu: np.ndarray,
) -> None:
    for s in range(keys.shape[0]):
        if used[s]:
            _put(nk, nv, nu, keys[s : s + 1], vals[s : s + 1])


def as_int64(values: Sequence[int | bytes]) -> np.ndarray:
    """64-bit keys from ints (any sign, up to 64 bits) or bytes (their last 8 bytes)."""
    try:  # vLLM's default: unsigned 64-bit ints, converted in C
        return np.array(values, dtype=np.uint64).view(np.int64)
    except (OverflowError, TypeError, ValueError):
        pass
    out = np.empty(len(values), dtype=np.uint64)
    for i, v in enumerate(values):
        out[i] = int.from_bytes(v[-8:], "big") if isinstance(v, bytes) else v & 0xFFFFFFFFFFFFFFFF
    return out.view(np.int64)


class IntMap:
    """int64 → int64, packed."""

    def __init__(self, capacity: int = 64) -> None:
        self._keys = np.zeros(capacity, dtype=np.int64)
        self._vals = np.zeros(capacity, dtype=np.int64)
        self._used = np.zeros(capacity, dtype=np.bool_)
        self._len = 0
        self._out = np.zeros(64, dtype=np.int64)

    def __len__(self) -> int:
        return self._len

    @property
    def nbytes(self) -> int:
        return int(self._keys.nbytes + self._vals.nbytes + self._used.nbytes)

    def get(self, key: int) -> int | None:
        found, value = _get(self._keys, self._vals, self._used, key)
        return int(value) if found else None

    def put_many(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Set keys[i] → values[i] (int64 arrays of one length)."""
        if self._len + len(keys) > _MAX_LOAD * len(self._keys):
            self._grow(self._len + len(keys))
        self._len += int(_put(self._keys, self._vals, self._used, keys, values))

    def pop_many(self, keys: np.ndarray) -> np.ndarray:
        """Remove the keys present; their values (in the order found)."""
        if len(keys) > len(self._out):
            self._out = np.zeros(len(keys), dtype=np.int64)
        n = int(_pop(self._keys, self._vals, self._used, keys, self._out))
        self._len -= n
        return self._out[:n].copy()

    def clear(self) -> None:
        self._used[:] = False
        self._len = 0

    def _grow(self, needed: int) -> None:
        size = max(int(len(self._keys) * _GROWTH), int(needed / _MAX_LOAD) + 1)
        keys = np.zeros(size, dtype=np.int64)
        vals = np.zeros(size, dtype=np.int64)
        used = np.zeros(size, dtype=np.bool_)
        _rehash(self._keys, self._vals, self._used, keys, vals, used)
        self._keys, self._vals, self._used = keys, vals, used
