"""`pdserve simulate` (typer): predict deployments' latency for a workload with the
simulator, and with --measured set the prediction beside a `pdserve bench` report.

Registered in pdserve/cli.py. Exit status: 0 done; 2 bad options, config or file.
"""

from __future__ import annotations

import json
import pathlib
from typing import Annotated

import typer
from rich.console import Console

from pdserve.bench.cli import _opt
from pdserve.sim.cli_common import (
    HOST_CORES_HELP,
    RUNS_HELP,
    bench_config,
    deployments,
    fit_host,
    layouts,
    load_profile,
    load_report,
    save_profile,
    trace_records,
)
from pdserve.sim.predict import compare, compare_stages, predict
from pdserve.sim.render import (
    compared_table,
    predictions_table,
    rounds_summary,
    simulate_json,
    stages_table,
)

_NOT_WORKLOAD = (
    "profile", "config", "measured", "json_path", "fit_host_on", "host_cores", "write_profile",
    "runs", "report_dir",
)  # fmt: skip


def simulate(
    profile: Annotated[
        pathlib.Path, typer.Option(help="Simulator profile (`pdserve profile --sim-profile`).")
    ],
    config: Annotated[
        list[str] | None,
        typer.Option(
            "--config",
            "-c",
            help="NAME=CONFIG (or CONFIG) of a deployment to predict; repeat for several. "
            "Default with --measured: the report's --deployments.",
        ),
    ] = None,
    measured: Annotated[
        pathlib.Path | None,
        typer.Option(
            help="A `pdserve bench --json` report: simulate its workload and options, and show "
            "predicted / measured per deployment (its phase names), with each measured "
            "percentile's 95 % interval when the report kept its requests."
        ),
    ] = None,
    fit_host_on: Annotated[
        str | None,
        typer.Option(
            help="With --measured: first fit the profile's cpu_host block (how a shared CPU "
            "host slows and spreads the engines and the serving layer under load) on this "
            "deployment of the run (and a local prompt's intake on its aggregated one, if "
            "any), then predict every deployment with it. For CPU machines only."
        ),
    ] = None,
    host_cores: Annotated[
        int | None, typer.Option(min=1, help=f"With --fit-host-on: {HOST_CORES_HELP}")
    ] = None,
    write_profile: Annotated[
        pathlib.Path | None,
        typer.Option(help="With --fit-host-on: save the fitted profile here."),
    ] = None,
    runs: Annotated[
        int | None,
        typer.Option(min=1, help=RUNS_HELP),
    ] = None,
    workload: Annotated[str | None, _opt("workload", extra=" mixed|synthetic|trace.")] = None,
    num_requests: Annotated[int | None, _opt("num_requests")] = None,
    concurrency: Annotated[int | None, _opt("concurrency")] = None,
    request_rate: Annotated[float | None, _opt("request_rate")] = None,
    seed: Annotated[int | None, _opt("seed")] = None,
    output_tokens: Annotated[int | None, _opt("output_tokens")] = None,
    short_tokens: Annotated[int | None, _opt("short_tokens")] = None,
    long_tokens: Annotated[int | None, _opt("long_tokens")] = None,
    long_fraction: Annotated[float | None, _opt("long_fraction")] = None,
    burst_size: Annotated[int | None, _opt("burst_size")] = None,
    input_dist: Annotated[str | None, _opt("input_dist")] = None,
    output_dist: Annotated[str | None, _opt("output_dist")] = None,
    trace: Annotated[pathlib.Path | None, _opt("trace")] = None,
    trace_time_scale: Annotated[float | None, _opt("trace_time_scale")] = None,
    trace_length_scale: Annotated[float | None, _opt("trace_length_scale")] = None,
    max_requests: Annotated[int | None, _opt("max_requests")] = None,
    max_input_tokens: Annotated[int | None, _opt("max_input_tokens")] = None,
    slo_ttft_s: Annotated[float | None, _opt("slo_ttft_s")] = None,
    slo_tpot_s: Annotated[float | None, _opt("slo_tpot_s")] = None,
    json_path: Annotated[pathlib.Path | None, typer.Option("--json", help="Write here.")] = None,
    report_dir: Annotated[
        pathlib.Path | None,
        typer.Option(
            "--report",
            help="With --measured: write an HTML report of predicted against measured "
            "(index.html, opens offline) and the JSON it was drawn from into this folder.",
        ),
    ] = None,
) -> None:
    """Predict TTFT / ITL / TPOT / E2E percentiles and goodput of deployments under a workload
    with the simulator (no cluster needed), optionally against a measured bench report."""
    options = {k: v for k, v in locals().items() if v is not None and k not in _NOT_WORKLOAD}
    console = Console()
    prof = load_profile(profile, console)
    report = load_report(measured, console) if measured is not None else None
    cfg = bench_config(report, options, console)
    records = trace_records(cfg, console)
    run_layouts = layouts(deployments(config, report, console), console)
    if (fit_host_on is not None or write_profile is not None) and report is None:
        console.print("[red]error:[/red] --fit-host-on and --write-profile need --measured")
        raise typer.Exit(2)
    if report_dir is not None and report is None:
        console.print("[red]error:[/red] --report needs --measured (it draws predicted against it)")
        raise typer.Exit(2)
    if fit_host_on is not None and report is not None:
        prof = fit_host(prof, report, run_layouts, fit_host_on, host_cores, console)
    if write_profile is not None:
        if fit_host_on is None:
            console.print("[red]error:[/red] --write-profile needs --fit-host-on")
            raise typer.Exit(2)
        save_profile(prof, write_profile, console)
    predictions = [predict(n, lay, prof, cfg, records, runs=runs) for n, lay in run_layouts.items()]
    console.print(predictions_table(predictions, cfg))
    rows = compare(predictions, report) if report is not None else []
    stage_rows = compare_stages(predictions, report) if report is not None else []
    if stage_rows:
        console.print(stages_table(stage_rows))
    if rows:
        console.print(compared_table(rows))
        for line in rounds_summary(rows):
            console.print(line)
    doc = simulate_json(prof, cfg, predictions, rows, stage_rows)
    if json_path is not None:
        json_path.write_text(json.dumps(doc, indent=2) + "\n")
        console.print(f"JSON written to {json_path}")
    if report_dir is not None:
        from pdserve.report.cli import write_page_report
        from pdserve.report.predicted_page import simulate_page

        write_page_report(simulate_page(doc, report), doc, report_dir, console)
