"""IntMap (the KV-event translator's engine hash → router hash map) against a dict."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.router.int_map import IntMap, as_int64

KEYS = st.integers(0, 40) | st.integers(2**63, 2**64 - 1) | st.integers(-(2**63), -1)
OPS = st.lists(
    st.tuples(st.sampled_from(["put", "pop", "clear"]), st.lists(KEYS, max_size=70)),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops=OPS)
def test_matches_a_dict(ops: list[tuple[str, list[int]]]) -> None:
    """Puts, pops (backward-shift deletes) and growth past the first table, with keys that
    collide in the table and keys past 2**63."""
    m = IntMap(capacity=8)
    model: dict[int, int] = {}
    for op, raw in ops:
        keys = as_int64(raw)
        if op == "put":
            values = np.arange(len(keys), dtype=np.int64) * 7 - 3
            m.put_many(keys, values)
            model.update(zip(keys.tolist(), values.tolist(), strict=True))
        elif op == "pop":
            got = m.pop_many(keys).tolist()
            want = [model.pop(k) for k in dict.fromkeys(keys.tolist()) if k in model]
            assert sorted(got) == sorted(want)
        else:
            m.clear()
            model.clear()
        assert len(m) == len(model)
    for k in range(-5, 45):
        assert m.get(int(as_int64([k])[0])) == model.get(int(as_int64([k])[0]))
    for k, v in model.items():
        assert m.get(k) == v


def test_bytes_keys_use_their_last_eight_bytes() -> None:
    digest = bytes(range(32))
    assert as_int64([digest])[0] == as_int64([int.from_bytes(digest[-8:], "big")])[0]
    assert as_int64([2**64 - 1])[0] == -1
