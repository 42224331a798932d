"""The KV block digest: bit-exact, position-aware, the same in every process (torch, CPU)."""

from __future__ import annotations

import pytest
import torch

from pdserve.kv_transfer.digest import BlockDigester

NUM_BLOCKS = 12


def caches(dtype: torch.dtype = torch.float32, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # Two layouts vLLM uses: K/V first then blocks, and blocks first.
    return {
        "layer.0": torch.randn(2, NUM_BLOCKS, 8, 2, 16, generator=g).to(dtype),
        "layer.1": torch.randn(NUM_BLOCKS, 2, 8, 2, 16, generator=g).to(dtype),
    }


def test_same_bytes_same_digest_in_a_fresh_digester() -> None:
    a, b = caches(seed=1), caches(seed=1)
    assert BlockDigester(a, NUM_BLOCKS).digests([0, 5, 11]) == BlockDigester(b, NUM_BLOCKS).digests(
        [0, 5, 11]
    )
    assert all(0 <= d < 2**64 for d in BlockDigester(a, NUM_BLOCKS).digests(range(NUM_BLOCKS)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_one_changed_element_in_any_layer_changes_only_its_block(dtype: torch.dtype) -> None:
    kv = caches(dtype)
    digester = BlockDigester(kv, NUM_BLOCKS)
    before = digester.digests(range(NUM_BLOCKS))
    kv["layer.0"][1, 4, 3, 1, 7] = kv["layer.0"][1, 4, 3, 1, 7] + 1  # V of block 4
    kv["layer.1"][9, 0, 0, 0, 0] = -kv["layer.1"][9, 0, 0, 0, 0] - 1  # K of block 9
    after = digester.digests(range(NUM_BLOCKS))
    changed = [i for i, (x, y) in enumerate(zip(before, after, strict=True)) if x != y]
    assert changed == [4, 9]


def test_the_smallest_bit_flip_is_seen() -> None:
    kv = caches()
    digester = BlockDigester(kv, NUM_BLOCKS)
    before = digester.digests([3])
    bits = kv["layer.1"].view(torch.int32)
    bits[3, 1, 5, 1, 2] ^= 1  # lowest mantissa bit
    assert digester.digests([3]) != before


def test_blocks_are_told_apart_by_position_and_layer() -> None:
    kv = caches()
    digester = BlockDigester(kv, NUM_BLOCKS)
    d = digester.digests([2, 3])
    assert digester.digests([3, 2]) == d[::-1]
    swapped = caches()
    swapped["layer.0"], swapped["layer.1"] = (
        kv["layer.1"].movedim(0, 1),
        kv["layer.0"].movedim(1, 0),
    )
    assert BlockDigester(swapped, NUM_BLOCKS).digests([2, 3]) != d
    # A block whose K and V trade places.
    kv["layer.0"][:, 2] = kv["layer.0"][:, 2].flip(0).clone()
    assert digester.digests([2])[0] != d[0]


def test_a_logical_block_of_several_kernel_blocks_is_one_digest() -> None:
    kv = caches()
    digester = BlockDigester(kv, NUM_BLOCKS, physical_per_logical=2)
    assert len(digester.digests([0, 5])) == 2
    before = digester.digests([5])
    kv["layer.1"][11, 0, 0, 0, 0] += 1  # kernel block 11 = second half of logical block 5
    assert digester.digests([5]) != before
    assert digester.digests([4]) == BlockDigester(caches(), NUM_BLOCKS, 2).digests([4])


def test_overwrite_changes_the_digest_and_only_those_blocks() -> None:
    kv = caches()
    digester = BlockDigester(kv, NUM_BLOCKS)
    before = digester.digests(range(NUM_BLOCKS))
    digester.overwrite([1, 7], 3.0)
    after = digester.digests(range(NUM_BLOCKS))
    assert [i for i in range(NUM_BLOCKS) if before[i] != after[i]] == [1, 7]
    assert torch.all(kv["layer.1"][7] == 3.0)


def test_a_cache_without_a_block_dimension_is_refused() -> None:
    with pytest.raises(ValueError, match="no dimension of 99 blocks"):
        BlockDigester(caches(), 99)
    with pytest.raises(ValueError, match="no KV cache tensors"):
        BlockDigester({}, NUM_BLOCKS)
