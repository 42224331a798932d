"""`python -m pdserve.bench.chunk_steps`: what a prompt chunk does to a decode step, by chunk
size, on one real vLLM engine of the decode pool (no Ray, no router, no KV connector), pinned
to one core, beside the cost model's prediction.

Per chunk size: start the engine with that per-step prompt cap (vLLM's
long_prefill_token_threshold, what the ITL guard sets on decode engines), open `--streams`
decoding streams, then prefill `--prompts` prompts of `--prompt-tokens` tokens one after the
other beside them. The engine's ITL-budget scheduler (pdserve.engine.itl_scheduler, with an
unbounded budget so the size under test holds) records every step that carried a chunk
beside the streams; the table shows their mean seconds, the streams' gaps, and the step the
deployment's `router.routing.cost_model` predicts for that chunk (est_decode_step_s +
chunk_s at the mean context the chunks attended to). Choose `itl_slo_s` from it.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import pathlib
import statistics
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from pdserve.config import PdserveConfig, load_config
from pdserve.engine.args import engine_args
from pdserve.engine.stats import EngineCounters, stat_logger_factory
from pdserve.engine.warmup import TOKEN_ID_RANGE
from pdserve.itl_budget import ItlSettings, chunk_s
from pdserve.model_source import resolve_model

app = typer.Typer(add_completion=False, help=__doc__)

STREAM_PROMPT_TOKENS = 50


async def _one_size(
    cfg: PdserveConfig, chunk: int, streams: int, prompts: int, prompt_tokens: int
) -> dict[str, float]:
    """Start an engine capped at `chunk` prompt tokens a step, measure, stop it."""
    from vllm import AsyncEngineArgs, SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

    args = engine_args(cfg, "decode", resolve_model(cfg.model))
    args.pop("kv_transfer_config", None)
    args.update(
        long_prefill_token_threshold=chunk,
        enable_prefix_caching=False,
        scheduler_cls="pdserve.engine.itl_scheduler.ItlBudgetScheduler",
        additional_config=ItlSettings(
            itl_slo_s=1e9, min_chunk_tokens=1, per_token_s=0, per_token_sq_s=0,
            decode_base_s=0, decode_per_seq_s=0, decode_per_context_token_s=0,
        ).to_config(),
    )  # fmt: skip
    counters = EngineCounters()
    engine = AsyncLLM.from_engine_args(
        AsyncEngineArgs(**args), stat_loggers=[stat_logger_factory(counters)]
    )
    low, high = TOKEN_ID_RANGE

    async def generate(rid: int, n_prompt: int, n_out: int, gaps: list[float]) -> None:
        ids = [low + (i * 7 + rid) % (high - low) for i in range(n_prompt)]
        sampling = SamplingParams(max_tokens=n_out, ignore_eos=True, temperature=0)
        last = None
        async for _ in engine.generate({"prompt_token_ids": ids}, sampling, f"r{rid}"):
            now = asyncio.get_running_loop().time()
            if last is not None:
                gaps.append(now - last)
            last = now

    try:
        await generate(10_000, 100, 4, [])  # warm up
        gaps: list[float] = []
        # The streams outlast the prompts; they are aborted once the prompts are done.
        tasks = [
            asyncio.create_task(generate(i, STREAM_PROMPT_TOKENS, 4000, gaps))
            for i in range(streams)
        ]
        await asyncio.sleep(0.5)
        h = counters.decode_stall_seconds
        before = (sum(h.counts), h.sum)
        for p in range(prompts):
            await generate(20_000 + p, prompt_tokens, 1, [])
        await asyncio.sleep(0.2)  # the last step's stats reach the counters
        stall_n, stall_s = sum(h.counts) - before[0], h.sum - before[1]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        gaps.sort()
        return {
            "step_s": stall_s / stall_n if stall_n else float("nan"),
            "gap_p50_s": statistics.median(gaps),
            "gap_p99_s": gaps[int(0.99 * (len(gaps) - 1))],
        }
    finally:
        engine.shutdown()


@app.command()
def main(
    config: Annotated[pathlib.Path, typer.Option(help="Deployment config.")] = pathlib.Path(
        "deploy/local-2p1d.yaml"
    ),
    chunks: Annotated[str, typer.Option(help="Chunk sizes, comma-separated.")] = (
        "64,128,256,512,1024,2048"
    ),
    streams: Annotated[int, typer.Option(help="Decoding streams beside the chunks.")] = 16,
    prompts: Annotated[int, typer.Option(help="Prompts prefilled per size.")] = 3,
    prompt_tokens: Annotated[int, typer.Option(help="Tokens per prompt.")] = 2048,
    core: Annotated[int, typer.Option(help="CPU core for the engine (-1: any).")] = 1,
    json_path: Annotated[pathlib.Path | None, typer.Option("--json")] = None,
) -> None:
    sizes = [int(c) for c in chunks.split(",") if c.strip()]
    if not sizes or min(sizes) < 1 or streams < 1 or prompts < 1:
        raise typer.BadParameter("--chunks of positive sizes, --streams >= 1, --prompts >= 1")
    cfg = load_config(config)
    if core >= 0:
        os.sched_setaffinity(0, {core})  # the engine-core process inherits it
    cost = cfg.router.routing.cost_model
    table = Table(title=f"decode steps beside {streams} streams, {prompt_tokens}-token prompts")
    for col in ("chunk", "step with chunk (ms)", "predicted (ms)", "gap p50 (ms)", "gap p99"):
        table.add_column(col, justify="right")
    rows: list[dict[str, float]] = []
    for chunk in sizes:
        got: dict[str, Any] = asyncio.run(_one_size(cfg, chunk, streams, prompts, prompt_tokens))
        gc.collect()
        context = (prompt_tokens - min(chunk, prompt_tokens)) / 2  # mean before a chunk
        predicted = cost.est_decode_step_s(streams, 0) + chunk_s(cost, chunk, int(context))
        rows.append({"chunk_tokens": chunk, "predicted_step_s": predicted, **got})
        table.add_row(
            str(chunk),
            f"{got['step_s'] * 1e3:.1f}",
            f"{predicted * 1e3:.1f}",
            f"{got['gap_p50_s'] * 1e3:.1f}",
            f"{got['gap_p99_s'] * 1e3:.1f}",
        )
    Console().print(table)
    if json_path is not None:
        doc = {"config": str(config), "streams": streams, "prompts": prompts,
               "prompt_tokens": prompt_tokens, "sizes": rows}  # fmt: skip
        json_path.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    app()
