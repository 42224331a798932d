"""What the KV digest costs: `python -m pdserve.kv_transfer.digest_bench [--device cuda]`.

Digests every block of a KV cache shaped like a real model's (one tensor per layer, vLLM's
block-major layout) with the digest the verified connector runs (digest.py), and times a plain
copy of the same bytes beside it: the copy is what the hardware's memory bandwidth allows, so
`digest / copy` says how many passes over the KV the digest costs, on any machine. Prints the
median of `--repeats` runs per shape as a table and, with --json, writes it.

Shapes: the demo model (2 layers, 2 KV heads x 32, float32, 128-token blocks: 128 KiB a block)
and an 8B-class model (32 layers, 8 KV heads x 128, bfloat16, 16-token blocks: 2 MiB a block).
"""

from __future__ import annotations

import json
import pathlib
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from pdserve.kv_transfer.digest import BlockDigester


@dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    block_tokens: int
    dtype: str

    def bytes_per_block(self) -> int:
        size = {"float32": 4, "bfloat16": 2, "float16": 2}[self.dtype]
        return 2 * self.layers * self.kv_heads * self.head_dim * self.block_tokens * size


SHAPES = (
    Shape("demo", 2, 2, 32, 128, "float32"),
    Shape("8b-class", 32, 8, 128, 16, "bfloat16"),
)


@dataclass(frozen=True)
class Row:
    shape: str
    device: str
    blocks: int
    mib: float
    digest_ms: float
    copy_ms: float
    digest_ms_per_mib: float
    digest_gib_per_s: float
    digest_over_copy: float


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _median_ms(torch: Any, device: str, fn: Any, repeats: int) -> float:
    fn()  # warm-up: coefficient tables, allocator
    _sync(torch, device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(torch, device)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(shape: Shape, device: str, num_blocks: int, repeats: int) -> Row:
    import torch

    dtype = getattr(torch, shape.dtype)
    caches = {
        f"layer.{i}": torch.randn(
            num_blocks, 2, shape.block_tokens, shape.kv_heads, shape.head_dim, device=device
        ).to(dtype)
        for i in range(shape.layers)
    }
    digester = BlockDigester(caches, num_blocks)
    blocks = list(range(num_blocks))
    digest_ms = _median_ms(torch, device, lambda: digester.digests(blocks), repeats)
    copy_ms = _median_ms(torch, device, lambda: [t.clone() for t in caches.values()], repeats)
    mib = num_blocks * shape.bytes_per_block() / 2**20
    return Row(
        shape=shape.name,
        device=device,
        blocks=num_blocks,
        mib=round(mib, 1),
        digest_ms=round(digest_ms, 3),
        copy_ms=round(copy_ms, 3),
        digest_ms_per_mib=round(digest_ms / mib, 4),
        digest_gib_per_s=round(mib / 1024 / (digest_ms / 1000), 2),
        digest_over_copy=round(digest_ms / copy_ms, 1),
    )


def main(
    device: Annotated[str, typer.Option(help="Where the KV lives: cpu or cuda.")] = "cpu",
    mib: Annotated[float, typer.Option(help="KV per measurement (one prompt's blocks).")] = 64.0,
    repeats: Annotated[int, typer.Option(min=1, help="Timed runs per shape (median).")] = 9,
    json_path: Annotated[pathlib.Path | None, typer.Option("--json", help="Write rows.")] = None,
) -> None:
    """Time the KV block digest against a plain copy of the same bytes."""
    rows = [
        measure(s, device, max(1, int(mib * 2**20 // s.bytes_per_block())), repeats) for s in SHAPES
    ]
    table = Table(title=f"KV digest cost on {device} (median of {repeats})")
    for column in ("shape", "MiB", "digest ms", "copy ms", "ms/MiB", "GiB/s", "digest/copy"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(
            r.shape, f"{r.mib}", f"{r.digest_ms}", f"{r.copy_ms}", f"{r.digest_ms_per_mib}",
            f"{r.digest_gib_per_s}", f"{r.digest_over_copy}x",
        )  # fmt: skip
    Console().print(table)
    if json_path is not None:
        json_path.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")


if __name__ == "__main__":
    typer.run(main)
