"""The `pdserve` command line: run a cluster on one machine or several (up, join, down),
inspect its config (serve-config, config-schema), make the demo model (demo-model), and measure
and watch a cluster (bench, bench-overload, bench-faults, kv-check, profile, top), predict
deployments (simulate, tune), estimate context trimming on a recorded agent run (context) and
report tenants' usage (tenants)."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Annotated, Any, cast

import typer
import yaml
from rich.console import Console

from pdserve.bench.cli import bench, bench_faults, bench_overload, bench_router, bench_tenants
from pdserve.cluster_cli import ConfigOpt, down, join, load, up
from pdserve.config import PdserveConfig
from pdserve.context.cli import context_app
from pdserve.kv_transfer.fabric_check.cli import kv_check
from pdserve.profiling.cli import profile
from pdserve.report.cli import report_app
from pdserve.sim.check_cli import sim_check
from pdserve.sim.cli import simulate
from pdserve.sim.tune_cli import tune
from pdserve.tenants_cli import tenants_app
from pdserve.top.cli import top

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


@app.command("demo-model")
def demo_model(
    out: Annotated[pathlib.Path, typer.Option("--out", help="Folder to create the model in.")],
    seed: Annotated[int, typer.Option(help="Weights seed.")] = 0,
    size: Annotated[
        str,
        typer.Option(
            help="tiny (default; 0.8 M parameters, float32) or gpu-check (208 M, bfloat16, "
            "415 MB: KV transfers big enough to measure)."
        ),
    ] = "tiny",
) -> None:
    """Create the built-in demo model (Llama architecture, local tokenizer), offline."""
    from pdserve.demo_model import create_demo_model
    from pdserve.demo_presets import PRESETS, DemoSize

    if size not in PRESETS:
        raise typer.BadParameter(
            f"{size!r} is not one of {', '.join(PRESETS)}", param_hint="--size"
        )
    path = create_demo_model(out, seed=seed, size=cast("DemoSize", size))
    typer.echo(f"demo model written to {path}")


@app.command("serve-config")
def serve_config(config: ConfigOpt = None) -> None:
    """Print the Ray Serve config (serveConfigV2) for a pdserve config."""
    from pdserve.deploy.serve_config import serve_config_for

    console = Console()
    cfg = load(config, console)
    typer.echo(yaml.safe_dump(serve_config_for(cfg), sort_keys=False))


@app.command("config-schema")
def config_schema() -> None:
    """Print the JSON schema of the pdserve config (every field with its description)."""
    import json

    typer.echo(json.dumps(PdserveConfig.model_json_schema(), indent=2))


# Commands defined in their own modules. `short_help` is their one line in `pdserve --help`
# (their docstrings, shown by `pdserve COMMAND --help`, run over several lines).
_COMMANDS: list[tuple[str, Callable[..., Any], str]] = [
    # pdserve.cluster_cli
    ("up", up, "Start pdserve on this machine (alone, or --head of a multi-node cluster)."),
    ("join", join, "Add this machine to a cluster's head as a node carrying given pools."),
    ("down", down, "Stop what up or join started on this machine."),
    # pdserve.bench
    ("bench", bench,
     "Benchmark an OpenAI-compatible endpoint; compare routing policies (--compare)."),
    ("bench-overload", bench_overload,
     "Overload test: 429s fast, no 5xx or hangs, admitted TTFT bounded (exit 1 if not)."),
    ("bench-router", bench_router,
     "Routing decision CPU time, prefix-index memory and ingest at fleet size (no engines)."),
    ("bench-faults", bench_faults,
     "Fault test: kill/freeze real engines under load; reliability table (exit 1: lost)."),
    ("bench-tenants", bench_tenants,
     "Tenants: one tenant's TTFT beside another's flood, sharing on/off; 3:1 weights."),
    # pdserve.kv_transfer.fabric_check, pdserve.profiling, pdserve.top
    ("kv-check", kv_check,
     "Measure NIXL latency and bandwidth between two agents; catch a TCP fallback."),
    ("profile", profile,
     "Calibrate the router's cost model on the running engines; print or --write it."),
    ("simulate", simulate,
     "Predict TTFT/ITL/goodput of deployments for a workload (simulator; no cluster)."),
    ("tune", tune,
     "Recommend aggregated or xPyD, chunk size and local-prefill threshold (simulator)."),
    ("sim-check", sim_check,
     "Bench layouts side by side; predicted vs measured ratios and recommended layout."),
    ("top", top,
     "Live terminal view of a running cluster: pools, latencies, KV transfer, routing."),
]  # fmt: skip
for _name, _command, _short_help in _COMMANDS:
    app.command(_name, short_help=_short_help)(_command)
app.add_typer(
    context_app,
    name="context",
    short_help="What-ifs on a recorded agent run's context: trimming vs prefill and prefix cache.",
)
app.add_typer(
    report_app,
    name="report",
    short_help="HTML reports of bench runs and prediction checks: redraw one, look at one.",
)
app.add_typer(
    tenants_app,
    name="tenants",
    short_help="Tenants: usage over a window (tokens, prefill seconds, 429s); key digests.",
)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
