"""The prefix index's packed storage: numba-compiled kernels over flat numpy arrays (pure).

`PrefixIndex` (prefix_index.py) is the interface; this module is its engine. No Python object
per entry: one table row per distinct block hash (shared by every replica that holds it) and
one entry row per (replica, block).

- Block table `t` (records of TABLE_ROW: one 16-byte row, so a probe is one cache line), open
  addressing with linear probing and backward-shift deletion (no tombstones), at most
  `MAX_LOAD` full: `key` (the router's block hash), `head` (first entry of the block's holder
  list; -1 = empty row), `aux` (>= 0: number of holders; < 0: the block is "wide", its holders
  are also a bitset in row -aux - 1 of `w_bits`).
- Entries: `e_rep` (replica slot), `e_blk` (its block's table row), `e_hnext` (next holder of
  the same block; the free list's link when free), `e_lprev`/`e_lnext` (the replica's LRU list,
  least recent first), `e_stamp` (last add/touch time, approximate mode only).
- Replicas: `r_head`/`r_tail` (LRU ends), `r_count` (entries), `r_cap` (capacity bound).
- Wide blocks (more than `NARROW_MAX` holders, e.g. a shared system prompt): a bitset row over
  replica slots, so a query ANDs 64 replicas per machine word instead of walking the list, and
  `wmap[row << 16 | slot]` → entry finds one holder's entry without a walk.

Bytes per (replica, block) entry in events mode: 18 in the entry rows plus 16 per table row
(/ its load, 0.57-0.85) shared by the block's holders; approximate mode adds 4 (`e_stamp`).

Growth is the caller's job (`PrefixIndex` checks room before each kernel call: the kernels
never allocate). Kernels are compiled on first use and cached on disk (`cache=True`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numba as nb
import numpy as np
from numba import types as nbt
from numba.typed import Dict as NumbaDict

NARROW_MAX = 8
"""Holders a block keeps as a list only; one more and it also gets a bitset row."""
MAX_LOAD = 0.85
"""Largest share of full block-table rows before the table grows."""
REPLICA_SLOT_LIMIT = 1 << 15
"""Replica slots are int16 (and keys of `wmap` use 16 bits)."""

# meta: the kernels' scalar state
M_BLOCKS = 0  # full block-table rows
M_FREE_E = 1  # head of the free entry list (-1: none)
M_HW_E = 2  # entry rows ever used (high-water mark)
M_FREE_W = 3  # head of the free wide-row list (-1: none)
M_HW_W = 4  # wide rows ever used
M_ENTRIES = 5  # live entries
META_LEN = 8

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_U32 = np.uint64(32)


class Packed(NamedTuple):
    """Every array of the index (see the module docstring)."""

    t: np.ndarray
    e_rep: np.ndarray
    e_blk: np.ndarray
    e_hnext: np.ndarray
    e_lprev: np.ndarray
    e_lnext: np.ndarray
    e_stamp: np.ndarray
    r_head: np.ndarray
    r_tail: np.ndarray
    r_count: np.ndarray
    r_cap: np.ndarray
    w_bits: np.ndarray
    w_next: np.ndarray
    meta: np.ndarray


TABLE_ROW = np.dtype([("key", np.int64), ("head", np.int32), ("aux", np.int32)])


def new_table(rows: int) -> np.ndarray:
    t = np.zeros(rows, dtype=TABLE_ROW)
    t["head"] = -1
    return t


def new_wmap() -> Any:
    return NumbaDict.empty(key_type=nbt.int64, value_type=nbt.int32)


# ---- block table ----


@nb.njit(cache=True, inline="always")
def _home(key: int, size: int) -> np.int64:
    """The key's first row: its mixed high 32 bits scaled to the table size."""
    x = np.uint64(key) * _GOLDEN
    return np.int64(((x >> _U32) * np.uint64(size)) >> _U32)


@nb.njit(cache=True, inline="always")
def _probe(p: Packed, key: int) -> int:
    """Table row of `key`, or -1 - the empty row where its probe ended."""
    size = p.t.shape[0]
    s = _home(key, size)
    while p.t[s].head != -1:
        if p.t[s].key == key:
            return s
        s += 1
        if s == size:
            s = 0
    return -1 - s


@nb.njit(cache=True, inline="always")
def find(p: Packed, key: int) -> int:
    """Table row of `key`, or -1."""
    s = _probe(p, key)
    return s if s >= 0 else -1


@nb.njit(cache=True, inline="always")
def _claim(p: Packed, key: int) -> int:
    """Table row of `key`, a new empty-holder row if absent (caller links a holder at once)."""
    s = _probe(p, key)
    if s >= 0:
        return s
    s = -1 - s
    p.t[s].key = key
    p.t[s].head = -2  # full, no holder yet
    p.t[s].aux = 0
    p.meta[M_BLOCKS] += 1
    return s


@nb.njit(cache=True)
def _move_row(p: Packed, src: int, dst: int) -> None:
    p.t[dst].key = p.t[src].key
    p.t[dst].head = p.t[src].head
    p.t[dst].aux = p.t[src].aux
    e = p.t[dst].head
    while e >= 0:
        p.e_blk[e] = dst
        e = p.e_hnext[e]


@nb.njit(cache=True)
def _delete_row(p: Packed, s: int) -> None:
    """Empty row `s` and shift later rows of its probe run back (no tombstones)."""
    size = p.t.shape[0]
    i = s
    j = s
    while True:
        j += 1
        if j == size:
            j = 0
        if p.t[j].head == -1:
            break
        k = _home(p.t[j].key, size)
        # move j to i when its home is not cyclically in (i, j]
        if (i <= j and (k <= i or k > j)) or (i > j and (k <= i and k > j)):
            _move_row(p, j, i)
            i = j
    p.t[i].head = -1
    p.t[i].aux = 0
    p.meta[M_BLOCKS] -= 1


@nb.njit(cache=True)
def rehash(old: Packed, p: Packed) -> None:
    """Copy every block of `old`'s table into `p`'s (empty, larger) table."""
    for s in range(old.t.shape[0]):
        if old.t[s].head == -1:
            continue
        d = _claim(p, old.t[s].key)
        p.t[d].head = old.t[s].head
        p.t[d].aux = old.t[s].aux
        e = p.t[d].head
        while e >= 0:
            p.e_blk[e] = d
            e = p.e_hnext[e]


# ---- holders ----


@nb.njit(cache=True, inline="always")
def _holder(p: Packed, wm: Any, s: int, rep: int) -> int:
    """Entry of replica slot `rep` on table row `s`, or -1."""
    aux = p.t[s].aux
    if aux < 0:
        key = np.int64(-aux - 1) << 16 | rep
        if key in wm:
            return wm[key]
        return -1
    e = p.t[s].head
    while e >= 0:
        if p.e_rep[e] == rep:
            return e
        e = p.e_hnext[e]
    return -1


@nb.njit(cache=True, inline="always")
def _link_holder(p: Packed, wm: Any, s: int, e: int) -> None:
    rep = np.int64(p.e_rep[e])
    head = p.t[s].head
    p.e_hnext[e] = head if head >= 0 else -1
    p.t[s].head = e
    p.e_blk[e] = s
    aux = p.t[s].aux
    if aux < 0:
        row = -aux - 1
        p.w_bits[row, rep >> 6] |= np.uint64(1) << np.uint64(rep & 63)
        wm[np.int64(row) << 16 | rep] = np.int32(e)
        p.w_next[row] += 1
        return
    aux += 1
    if aux <= NARROW_MAX:
        p.t[s].aux = aux
        return
    row = p.meta[M_FREE_W]  # promote: a bitset row (the caller ensured one is free)
    if row >= 0:
        p.meta[M_FREE_W] = p.w_next[row]
    else:
        row = p.meta[M_HW_W]
        p.meta[M_HW_W] += 1
    p.w_bits[row, :] = 0
    p.w_next[row] = aux  # a used row's w_next holds its holder count
    x = p.t[s].head
    while x >= 0:
        r = np.int64(p.e_rep[x])
        p.w_bits[row, r >> 6] |= np.uint64(1) << np.uint64(r & 63)
        wm[np.int64(row) << 16 | r] = np.int32(x)
        x = p.e_hnext[x]
    p.t[s].aux = -(row + 1)


@nb.njit(cache=True, inline="always")
def _unlink_holder(p: Packed, wm: Any, e: int) -> None:
    s = p.e_blk[e]
    rep = np.int64(p.e_rep[e])
    prev = -1
    x = p.t[s].head
    while x != e:
        prev = x
        x = p.e_hnext[x]
    if prev < 0:
        p.t[s].head = p.e_hnext[e] if p.e_hnext[e] >= 0 else -2
    else:
        p.e_hnext[prev] = p.e_hnext[e]
    aux = p.t[s].aux
    if aux < 0:
        row = -aux - 1
        p.w_bits[row, rep >> 6] &= ~(np.uint64(1) << np.uint64(rep & 63))
        del wm[np.int64(row) << 16 | rep]
        p.w_next[row] -= 1
        if p.w_next[row] == 0:
            p.w_next[row] = p.meta[M_FREE_W]
            p.meta[M_FREE_W] = row
            p.t[s].aux = 0
    else:
        p.t[s].aux = aux - 1
    if p.t[s].head == -2:
        _delete_row(p, s)


# ---- entries and LRU lists ----


@nb.njit(cache=True, inline="always")
def _lru_unlink(p: Packed, e: int) -> None:
    rep = p.e_rep[e]
    a = p.e_lprev[e]
    b = p.e_lnext[e]
    if a >= 0:
        p.e_lnext[a] = b
    else:
        p.r_head[rep] = b
    if b >= 0:
        p.e_lprev[b] = a
    else:
        p.r_tail[rep] = a


@nb.njit(cache=True, inline="always")
def _lru_append(p: Packed, e: int) -> None:
    rep = p.e_rep[e]
    tail = p.r_tail[rep]
    p.e_lprev[e] = tail
    p.e_lnext[e] = -1
    if tail >= 0:
        p.e_lnext[tail] = e
    else:
        p.r_head[rep] = e
    p.r_tail[rep] = e


@nb.njit(cache=True, inline="always")
def _drop(p: Packed, wm: Any, e: int) -> None:
    """Remove entry `e` everywhere and free its row."""
    rep = p.e_rep[e]
    _unlink_holder(p, wm, e)
    _lru_unlink(p, e)
    p.r_count[rep] -= 1
    p.meta[M_ENTRIES] -= 1
    p.e_rep[e] = -1
    p.e_hnext[e] = p.meta[M_FREE_E]
    p.meta[M_FREE_E] = e


@nb.njit(cache=True)
def expire(p: Packed, wm: Any, rep: int, cutoff: float) -> None:
    """Approximate mode: drop `rep`'s entries last added/touched before `cutoff` (the LRU
    list is in stamp order, so they are at its head)."""
    while p.r_head[rep] >= 0 and p.e_stamp[p.r_head[rep]] < cutoff:
        _drop(p, wm, p.r_head[rep])


@nb.njit(cache=True)
def expire_all(p: Packed, wm: Any, cutoff: float) -> None:
    for rep in range(p.r_head.shape[0]):
        expire(p, wm, rep, cutoff)


@nb.njit(cache=True)
def shrink(p: Packed, wm: Any, rep: int) -> None:
    """Evict `rep`'s least recent entries down to its capacity."""
    while p.r_count[rep] > p.r_cap[rep]:
        _drop(p, wm, p.r_head[rep])


# ---- the operations PrefixIndex calls ----


@nb.njit(cache=True)
def add(
    p: Packed, wm: Any, rep: int, keys: np.ndarray, now: float, touch_only: bool, stamped: bool
) -> None:
    """Add (or with `touch_only`, only refresh) `rep`'s blocks, last key first so the first
    block ends most recent; then evict down to capacity. `stamped`: record times (approximate
    mode). The caller ensured room for len(keys) more blocks, entries and wide rows."""
    for i in range(keys.shape[0] - 1, -1, -1):
        key = keys[i]
        if touch_only:
            s = find(p, key)
            if s < 0:
                continue
        else:
            s = _claim(p, key)
        e = _holder(p, wm, s, rep) if p.t[s].head >= 0 else -1
        if e >= 0:
            _lru_unlink(p, e)
        elif touch_only:
            continue
        else:
            e = p.meta[M_FREE_E]
            if e >= 0:
                p.meta[M_FREE_E] = p.e_hnext[e]
            else:
                e = p.meta[M_HW_E]
                p.meta[M_HW_E] += 1
            p.e_rep[e] = rep
            _link_holder(p, wm, s, e)
            p.r_count[rep] += 1
            p.meta[M_ENTRIES] += 1
        if stamped:
            p.e_stamp[e] = now
        _lru_append(p, e)
    shrink(p, wm, rep)


@nb.njit(cache=True)
def remove(p: Packed, wm: Any, rep: int, keys: np.ndarray) -> None:
    for i in range(keys.shape[0]):
        s = find(p, keys[i])
        if s >= 0:
            e = _holder(p, wm, s, rep)
            if e >= 0:
                _drop(p, wm, e)


@nb.njit(cache=True)
def clear(p: Packed, wm: Any, rep: int) -> None:
    while p.r_head[rep] >= 0:
        _drop(p, wm, p.r_head[rep])


@nb.njit(cache=True)
def held_prefix(
    p: Packed, wm: Any, rep: int, keys: np.ndarray, cutoff: float, stamped: bool
) -> int:
    """Blocks of `keys` from the first that `rep` holds (entries stamped before `cutoff`
    count as gone when `stamped`); stops at the first miss."""
    n = 0
    for i in range(keys.shape[0]):
        s = find(p, keys[i])
        if s < 0:
            break
        e = _holder(p, wm, s, rep)
        if e < 0 or (stamped and p.e_stamp[e] < cutoff):
            break
        n += 1
    return n


@nb.njit(cache=True, inline="always")
def _set_bits_of_list(p: Packed, s: int, into: np.ndarray, within: np.ndarray) -> None:
    """into |= holders of narrow row `s` that are also in `within` (all of them when
    within is None-like: pass `into` zeroed and `within` all ones)."""
    e = p.t[s].head
    while e >= 0:
        r = np.int64(p.e_rep[e])
        bit = np.uint64(1) << np.uint64(r & 63)
        if within[r >> 6] & bit:
            into[r >> 6] |= bit
        e = p.e_hnext[e]


@nb.njit(cache=True)
def prefix_depths(p: Packed, keys: np.ndarray, depth: np.ndarray) -> int:
    """For every replica slot, how many of `keys` from the first it holds (stops at its first
    miss), written into `depth` (zeroed here; one element per replica slot). Returns the
    deepest. Cost: one table probe per key up to the point no replica holds the prefix, each
    ANDing the holders (a bitset word per 64 replica slots), plus one write per replica that
    holds the first block. Approximate mode: call `expire_all` first."""
    depth[:] = 0
    words = p.w_bits.shape[1]
    ones = np.full(words, np.uint64(0xFFFFFFFFFFFFFFFF), dtype=np.uint64)
    alive = np.zeros(words, dtype=np.uint64)
    nxt = np.zeros(words, dtype=np.uint64)
    done = 0
    for i in range(keys.shape[0]):
        s = find(p, keys[i])
        if s < 0:
            break
        within = ones if i == 0 else alive
        aux = p.t[s].aux
        if aux < 0:
            row = -aux - 1
            for w in range(words):
                nxt[w] = p.w_bits[row, w] & within[w]
        else:
            nxt[:] = 0
            _set_bits_of_list(p, s, nxt, within)
        if i > 0:
            for w in range(words):  # replicas that held blocks 0..i-1 but not block i
                gone = alive[w] & ~nxt[w]
                while gone:
                    low = gone & (~gone + np.uint64(1))
                    depth[w * 64 + _bit_index(low)] = i
                    gone ^= low
        any_alive = False
        for w in range(words):
            alive[w] = nxt[w]
            if nxt[w]:
                any_alive = True
        done = i + 1
        if not any_alive:
            return i
    for w in range(words):
        live = alive[w]
        while live:
            low = live & (~live + np.uint64(1))
            depth[w * 64 + _bit_index(low)] = done
            live ^= low
    return done


@nb.njit(cache=True, inline="always")
def _bit_index(low: np.uint64) -> int:
    """Index of the single set bit of `low`."""
    n = 0
    x = low
    if x >= np.uint64(1) << np.uint64(32):
        n += 32
        x >>= np.uint64(32)
    if x >= np.uint64(1) << np.uint64(16):
        n += 16
        x >>= np.uint64(16)
    if x >= np.uint64(1) << np.uint64(8):
        n += 8
        x >>= np.uint64(8)
    if x >= np.uint64(1) << np.uint64(4):
        n += 4
        x >>= np.uint64(4)
    if x >= np.uint64(1) << np.uint64(2):
        n += 2
        x >>= np.uint64(2)
    if x >= np.uint64(1) << np.uint64(1):
        n += 1
    return n
