"""`python -m pdserve.bench.engine_warmup`: what an engine's warm-up burst buys, on one real
vLLM engine of a pool (no Ray, no router, no KV connector), pinned to one core.

Each start runs the pool's warm-up as its replica does (pdserve.engine.warmup), with the burst
(`engine.warmup_burst_prompts` as configured) or without it (0), alternating, then sends
`--bursts` bursts of `--burst-size` distinct `--long-tokens`-token prompts at once (like the
`mixed` workload's long bursts), one after the other. Per variant it prints the first burst's
latency, the median of the later ones and their ratio, medians over the starts.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import pathlib
import random
import statistics
from typing import Annotated, Any, cast

import typer
from rich.console import Console
from rich.table import Table

from pdserve.config import PdserveConfig, load_config
from pdserve.engine.args import engine_args
from pdserve.engine.warmup import TOKEN_ID_RANGE, prefill_at_once, warm_up
from pdserve.model_source import resolve_model
from pdserve.names import PoolName

app = typer.Typer(add_completion=False, help=__doc__)
VARIANTS = ("prompt only", "prompt + burst")


async def _one_start(
    cfg: PdserveConfig, role: PoolName, with_burst: bool, opts: dict[str, int], seed: int
) -> list[float]:
    """Start an engine, warm it up, time `bursts` client bursts (seconds each), stop it."""
    from vllm import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    eng = cfg.pool(role).engine
    if not with_burst:
        eng = eng.model_copy(update={"warmup_burst_prompts": 0})
    args = engine_args(cfg, role, resolve_model(cfg.model))
    args.pop("kv_transfer_config", None)
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**args))
    try:
        await warm_up(engine, eng, cfg.platform, cfg.model.max_model_len_tokens, "warmup")
        rng = random.Random(seed)
        took_s = []
        for b in range(opts["bursts"]):
            prompts = [
                [rng.randrange(*TOKEN_ID_RANGE) for _ in range(opts["long_tokens"])]
                for _ in range(opts["burst_size"])
            ]
            took_s.append(await prefill_at_once(engine, prompts, f"burst-{b}"))
        return took_s
    finally:
        engine.shutdown()


@app.command()
def main(
    config: Annotated[pathlib.Path, typer.Option(help="Deployment config.")] = pathlib.Path(
        "deploy/local.yaml"
    ),
    role: Annotated[str, typer.Option(help="Pool whose engine settings to use.")] = "prefill",
    core: Annotated[int, typer.Option(help="CPU core for the engine (-1: any).")] = 0,
    starts: Annotated[int, typer.Option(help="Engine starts per variant.")] = 3,
    bursts: Annotated[int, typer.Option(help="Client bursts per start.")] = 6,
    burst_size: Annotated[int, typer.Option(help="Prompts per burst.")] = 4,
    long_tokens: Annotated[int, typer.Option(help="Tokens per prompt.")] = 1500,
    json_path: Annotated[pathlib.Path | None, typer.Option("--json")] = None,
) -> None:
    if role not in ("prefill", "decode") or bursts < 2 or starts < 1:
        raise typer.BadParameter("--role prefill|decode, --bursts >= 2, --starts >= 1")
    cfg = load_config(config)
    if core >= 0:
        os.sched_setaffinity(0, {core})  # the engine-core process inherits it
    opts = {"bursts": bursts, "burst_size": burst_size, "long_tokens": long_tokens}
    pool = cast(PoolName, role)
    runs: dict[str, list[list[float]]] = {v: [] for v in VARIANTS}
    for s in range(starts):
        for v in VARIANTS:
            got = asyncio.run(_one_start(cfg, pool, v == VARIANTS[1], opts, seed=s))
            gc.collect()  # the stopped engine's last references, while the interpreter runs
            runs[v].append(got)
    table = Table(
        title=f"{role} engine, {burst_size} x {long_tokens} tokens at once, {starts} starts"
    )
    for col in ("warm-up", "first burst (ms)", "later bursts (ms)", "first / later"):
        table.add_column(col)
    summary: dict[str, Any] = {}
    for v, per_start in runs.items():
        first = statistics.median(r[0] for r in per_start)
        later = statistics.median(statistics.median(r[1:]) for r in per_start)
        summary[v] = {"first_s": first, "later_s": later, "runs_s": per_start}
        table.add_row(v, f"{first * 1e3:.0f}", f"{later * 1e3:.0f}", f"{first / later:.2f}x")
    Console().print(table)
    if json_path is not None:
        json_path.write_text(
            json.dumps({"config": str(config), "role": role, **opts, "variants": summary}, indent=2)
            + "\n"
        )


if __name__ == "__main__":
    app()
