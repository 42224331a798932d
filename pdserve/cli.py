"""The `pdserve` command line: run a local cluster (up, down), inspect its config
(serve-config, config-schema), make the demo model (demo-model), and measure and watch a cluster
(bench, kv-check, profile, top)."""

from __future__ import annotations

import pathlib
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer
import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from pdserve.bench.cli import bench, bench_faults, bench_overload
from pdserve.config import ConfigError, PdserveConfig, load_config
from pdserve.kv_transfer.fabric_check.cli import kv_check
from pdserve.profiling.cli import profile
from pdserve.top.cli import top

if TYPE_CHECKING:
    from pdserve.local_cluster import DeploymentProgress

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
DEFAULT_CONFIG = pathlib.Path(__file__).resolve().parent.parent / "deploy" / "local.yaml"

ConfigOpt = Annotated[
    pathlib.Path | None,
    typer.Option("--config", "-c", help="pdserve YAML config (default: deploy/local.yaml)."),
]


def _load(path: pathlib.Path | None, console: Console) -> PdserveConfig:
    if path is None:
        from importlib.resources import files

        packaged = pathlib.Path(str(files("pdserve.deploy") / "local.yaml"))
        path = packaged if packaged.exists() else DEFAULT_CONFIG
    try:
        return load_config(path)
    except ConfigError as exc:
        console.print(f"[red]config error:[/red] {exc}")
        raise typer.Exit(2) from exc


class _ProgressLines:
    """Start-up progress as plain lines: one per deployment whose state changed."""

    def __init__(self, emit: Callable[[str], None], t0_s: float) -> None:
        self._emit = emit
        self._t0_s = t0_s
        self._last: dict[str, tuple[str, int, int, str]] = {}

    def __call__(self, rows: list[DeploymentProgress]) -> None:
        for r in rows:
            state = (r.status, r.num_running, r.num_target, r.message)
            if self._last.get(r.name) != state:
                self._last[r.name] = state
                elapsed_s = time.monotonic() - self._t0_s
                self._emit(
                    f"[{elapsed_s:5.0f} s] {r.name}: {r.status} "
                    f"{r.num_running}/{r.num_target} {r.message[:160]}".rstrip()
                )


@app.command()
def up(
    config: ConfigOpt = None,
    detach: Annotated[
        bool, typer.Option(help="Return once ready; stop with `pdserve down`.")
    ] = False,
    timeout_s: Annotated[
        float,
        typer.Option(
            "--timeout-s", min=1.0, help="Give up (and stop what started) after this many seconds."
        ),
    ] = 900.0,
) -> None:
    """Start Ray locally and deploy the prefill/decode cluster; print the URL when ready."""
    from pdserve import local_cluster as lc
    from pdserve.model_source import resolve_model

    console = Console()
    cfg = _load(config, console)
    with console.status(f"preparing model '{cfg.model.source}'"):
        path = resolve_model(cfg.model)
    console.print(f"model: {path}")
    shm_before = lc.shm_snapshot()
    with console.status("starting Ray"):
        started = lc.start_ray(cfg)
    lc.write_state(started, shm_before, cfg)
    url = f"http://{cfg.router.host}:{cfg.router.port}"
    t0 = time.monotonic()

    def render(rows: list[lc.DeploymentProgress]) -> Table:
        table = Table(
            title=f"starting pdserve ({time.monotonic() - t0:.0f} s; engines take 30-60 s)"
        )
        for col in ("deployment", "status", "replicas", "message"):
            table.add_column(col)
        for r in rows:
            table.add_row(r.name, r.status, f"{r.num_running}/{r.num_target}", r.message[:80])
        return table

    try:
        if console.is_terminal:
            with Live(render([]), console=console, refresh_per_second=2, transient=False) as live:
                lc.deploy(cfg, lambda rows: live.update(render(rows)), timeout_s)
        else:  # a log, not a screen: one line per change, so a stuck start shows where
            lc.deploy(cfg, _ProgressLines(console.print, t0), timeout_s)
        with console.status("waiting for the router to see both pools (GET /ready)"):
            lc.wait_router_ready(url, max(10.0, timeout_s - (time.monotonic() - t0)))
    except (lc.ClusterError, KeyboardInterrupt) as exc:
        console.print(f"[red]start-up failed:[/red] {exc}")
        lc.down(console.print)
        raise typer.Exit(1) from exc
    console.print(
        f"[green]pdserve is ready[/green] at {url}  (model id: {cfg.model.served_model_name})"
    )
    console.print(
        f"  try: curl {url}/v1/chat/completions -H 'content-type: application/json' "
        f'-d \'{{"model":"{cfg.model.served_model_name}","messages":'
        '[{"role":"user","content":"hello"}],"max_tokens":16}\''
    )
    if detach:
        console.print("running in the background; stop it with `pdserve down`")
        return
    console.print("press Ctrl-C to stop")
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop:
        time.sleep(0.5)
    console.print("stopping")
    lc.down(console.print)


@app.command()
def down() -> None:
    """Stop everything `pdserve up` started (Serve app, engines, Ray, /dev/shm buffers)."""
    from pdserve import local_cluster as lc

    console = Console()
    lc.down(console.print)
    console.print("pdserve stopped")


@app.command("demo-model")
def demo_model(
    out: Annotated[pathlib.Path, typer.Option("--out", help="Folder to create the model in.")],
    seed: Annotated[int, typer.Option(help="Weights seed.")] = 0,
) -> None:
    """Create the built-in tiny demo model (Llama architecture, local tokenizer), offline."""
    from pdserve.demo_model import create_demo_model

    path = create_demo_model(out, seed=seed)
    typer.echo(f"demo model written to {path}")


@app.command("serve-config")
def serve_config(config: ConfigOpt = None) -> None:
    """Print the Ray Serve config (serveConfigV2) for a pdserve config."""
    from pdserve.deploy.serve_config import serve_config_for

    console = Console()
    cfg = _load(config, console)
    typer.echo(yaml.safe_dump(serve_config_for(cfg), sort_keys=False))


# Commands defined in their own packages. `short_help` is their one line in `pdserve --help`
# (their docstrings, shown by `pdserve COMMAND --help`, run over several lines).
app.command(
    "bench",
    short_help="Benchmark an OpenAI-compatible endpoint; compare routing policies (--compare).",
)(bench)  # pdserve.bench
app.command(
    "bench-overload",
    short_help="Overload test: 429s fast, no 5xx or hangs, admitted TTFT bounded (exit 1 if not).",
)(bench_overload)  # pdserve.bench
app.command(
    "bench-faults",
    short_help="Fault test: kill/freeze real engines under load; reliability table (exit 1: lost).",
)(bench_faults)  # pdserve.bench


@app.command("config-schema")
def config_schema() -> None:
    """Print the JSON schema of the pdserve config (every field with its description)."""
    import json

    typer.echo(json.dumps(PdserveConfig.model_json_schema(), indent=2))


app.command(
    "kv-check",
    short_help="Measure NIXL latency and bandwidth between two agents; catch a TCP fallback.",
)(kv_check)  # pdserve.kv_transfer.fabric_check
app.command(
    "profile",
    short_help="Calibrate the router's cost model on the running engines; print or --write it.",
)(profile)  # pdserve.profiling
app.command(
    "top",
    short_help="Live terminal view of a running cluster: pools, latencies, KV transfer, routing.",
)(top)  # pdserve.top


def main() -> None:
    app()


if __name__ == "__main__":
    main()
