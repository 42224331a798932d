"""`pdserve tune` (typer): search deployment layouts with the simulator and recommend one.

Registered in pdserve/cli.py. Reads a simulator profile (`pdserve profile --sim-profile`), a
base config (model, engines, router), a workload, SLOs and a device budget; prints the ranked
candidates and the recommendation, each with its predicted TTFT and ITL (p50/p90/p99);
`--write` saves the recommended config, `--write-helm` the Helm values that deploy it. On a
CPU machine whose engines share cores with the serving layer, `--fit-on RUN` first fits the
profile's `cpu_host` block on a run measured now (as `pdserve simulate --fit-host-on` does).

The ITL goal: `--max-itl-p99-s`, by default the base config's `router.routing.itl_slo_s` (the
decode streams' budget per engine step, which the ITL guard holds local prefills to) plus its
`router.stream_batch_interval_ms` (a client's gap is up to the interval plus a step; the
simulator applies the guard and the decode engines' budget-sized chunks as the deployment
would), so a
local-prefill threshold whose local prefills would cost the streams their ITL tail is not
recommended. Exit status: 0 done; 1 no candidate reaches --target-goodput within the
bounds; 2 bad options.
"""

from __future__ import annotations

import pathlib
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pdserve.bench.cli import _opt
from pdserve.bench.stats import sig3
from pdserve.config import ConfigError, PdserveConfig, load_config
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
from pdserve.sim.search import P99_TIE, Ranked, candidates, meets_target, rank, typical_ttft_s

_NOT_WORKLOAD = {
    "profile", "config", "devices", "chunk_tokens", "local_thresholds", "no_aggregated",
    "target_goodput", "workload_from", "top", "write", "write_helm", "max_ttft_p99_s",
    "max_itl_p99_s", "runs", "fit_on", "fit_host_on", "host_cores", "write_profile",
}  # fmt: skip
SEARCH = "Search"
CPU_HOST = "CPU host (shared cores)"


def _int_list(text: str, what: str, *, allow_none: bool) -> list[int | None]:
    """Comma-separated integers >= 0 ('none' allowed when `allow_none`)."""
    out: list[int | None] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if allow_none and part in ("none", "whole"):
            out.append(None)
        elif part.isdigit() and (int(part) > 0 or not allow_none):
            out.append(int(part))
        else:
            raise typer.BadParameter(f"{what}: {part!r} is not an integer > 0 (or 'none')")
    if not out:
        raise typer.BadParameter(f"{what}: give at least one value")
    return out


def tune(
    profile: Annotated[
        pathlib.Path, typer.Option(help="Simulator profile (`pdserve profile --sim-profile`).")
    ],
    config: Annotated[
        pathlib.Path,
        typer.Option("--config", "-c", help="Base pdserve config: model, engines, router."),
    ],
    devices: Annotated[
        int, typer.Option(min=1, help="Device budget: engines (GPUs; cores on CPU) to use.")
    ],
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
    write: Annotated[
        pathlib.Path | None, typer.Option(help="Write the recommended pdserve config here.")
    ] = None,
    write_helm: Annotated[
        pathlib.Path | None,
        typer.Option(help="Write Helm values (the chart's pdserve block and worker groups)."),
    ] = None,
    workload_from: Annotated[
        pathlib.Path | None,
        typer.Option(
            help="Take the workload from a `pdserve bench --json` report.", rich_help_panel=SEARCH
        ),
    ] = None,
    chunk_tokens: Annotated[
        str,
        typer.Option(
            help="Prefill chunk sizes to try, comma-separated; 'none' = whole.",
            rich_help_panel=SEARCH,
        ),
    ] = "256,512,1024,none",
    local_thresholds: Annotated[
        str,
        typer.Option(
            help="local_prefill_max_cold_tokens values to try (disaggregated).",
            rich_help_panel=SEARCH,
        ),
    ] = "0,128,512",
    no_aggregated: Annotated[
        bool,
        typer.Option("--no-aggregated", help="Only disaggregated layouts.", rich_help_panel=SEARCH),
    ] = False,
    target_goodput: Annotated[
        float,
        typer.Option(
            min=0,
            max=1,
            help="Fraction of requests that must meet both SLOs (TTFT, TPOT).",
            rich_help_panel=SEARCH,
        ),
    ] = 0.99,
    max_ttft_p99_s: Annotated[
        float | None,
        typer.Option(
            "--max-ttft-p99-s",
            min=0,
            help="Also require predicted TTFT p99 <= this.",
            rich_help_panel=SEARCH,
        ),
    ] = None,
    max_itl_p99_s: Annotated[
        float | None,
        typer.Option(
            "--max-itl-p99-s",
            min=0,
            help="Also require predicted ITL p99 <= this [default: the base config's "
            "router.routing.itl_slo_s + router.stream_batch_interval_ms; 0 = no ITL bound].",
            rich_help_panel=SEARCH,
        ),
    ] = None,
    runs: Annotated[
        int | None,
        typer.Option(min=1, help=f"Per candidate: {RUNS_HELP}", rich_help_panel=SEARCH),
    ] = None,
    top: Annotated[
        int, typer.Option(min=1, help="Rows of the ranked table.", rich_help_panel=SEARCH)
    ] = 12,
    fit_on: Annotated[
        pathlib.Path | None,
        typer.Option(
            help="A `pdserve bench --deployments ... --json` run measured on this machine now: "
            "fit the profile's cpu_host block on it before searching (CPU machines whose "
            "engines share cores with the router and Ray Serve).",
            rich_help_panel=CPU_HOST,
        ),
    ] = None,
    fit_host_on: Annotated[
        str | None,
        typer.Option(
            help="With --fit-on: the run's deployment to fit on (default: its first "
            "disaggregated one).",
            rich_help_panel=CPU_HOST,
        ),
    ] = None,
    host_cores: Annotated[
        int | None,
        typer.Option(min=1, help=f"With --fit-on: {HOST_CORES_HELP}", rich_help_panel=CPU_HOST),
    ] = None,
    write_profile: Annotated[
        pathlib.Path | None,
        typer.Option(help="With --fit-on: save the fitted profile.", rich_help_panel=CPU_HOST),
    ] = None,
) -> None:
    """Recommend a layout (aggregated or xPyD, chunk size, local-prefill threshold) for a
    workload and SLOs on a device budget, from simulations fitted to your engines."""
    options = {k: v for k, v in locals().items() if v is not None and k not in _NOT_WORKLOAD}
    console = Console()
    if fit_on is None and (fit_host_on is not None or write_profile is not None):
        console.print("[red]error:[/red] --fit-host-on and --write-profile need --fit-on")
        raise typer.Exit(2)
    prof = load_profile(profile, console)
    if fit_on is not None:
        run = load_report(fit_on, console)
        if not run.config.get("deployments"):
            console.print(
                f"[red]error:[/red] {fit_on} records no deployment configs (benched with "
                "--url): bench it with `pdserve bench --deployments NAME=CONFIG,...` so the fit "
                "knows each layout"
            )
            raise typer.Exit(2)
        run_layouts = layouts(deployments(None, run, console), console)
        prof = fit_host(prof, run, run_layouts, fit_host_on, host_cores, console)
        if write_profile is not None:
            save_profile(prof, write_profile, console)
    try:
        base = load_config(config)
    except ConfigError as exc:
        console.print(f"[red]config error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    max_itl_p99_s = itl_bound_s(max_itl_p99_s, base)
    report = load_report(workload_from, console) if workload_from is not None else None
    cfg = bench_config(report, options, console)
    records = trace_records(cfg, console)
    chunks = _int_list(chunk_tokens, "--chunk-tokens", allow_none=True)
    thresholds = [
        t or 0 for t in _int_list(local_thresholds, "--local-thresholds", allow_none=False)
    ]
    points = candidates(devices, chunks, thresholds, aggregated=not no_aggregated)
    with console.status(f"simulating {len(points)} candidates"):
        ranked = rank(
            base, prof, cfg, points, records, target_goodput=target_goodput,
            max_ttft_p99_s=max_ttft_p99_s, max_itl_p99_s=max_itl_p99_s, runs=runs,
        )  # fmt: skip
    console.print(
        _table(ranked[:top], cfg.slo_ttft_s, cfg.slo_tpot_s, target_goodput, max_itl_p99_s)
    )
    if len(ranked[0].prediction.classes) > 1:
        console.print(_class_table(ranked[:top]))
    best = ranked[0]
    goodput = best.prediction.metrics.goodput_fraction or 0.0
    if not meets_target(best, target_goodput, max_ttft_p99_s, max_itl_p99_s):
        console.print(
            f"[red]no candidate reaches goodput {target_goodput:.0%} within the p99 bounds[/red] "
            f"(best: {best.candidate.label()} at {goodput:.1%}): more devices, looser SLOs or "
            "less load"
        )
        raise typer.Exit(1)
    m = best.prediction.metrics
    console.print(
        f"[green]recommended:[/green] {best.candidate.label()} on {best.candidate.num_devices} "
        f"device(s): TTFT p50 {sig3(m.ttft_p50_s)} s, p90 {sig3(m.ttft_p90_s)} s, p99 "
        f"{sig3(m.ttft_p99_s)} s; ITL p50 {sig3(m.itl_p50_s)} s, p90 {sig3(m.itl_p90_s)} s, p99 "
        f"{sig3(m.itl_p99_s)} s{_bound_note(max_itl_p99_s)}; goodput {goodput:.1%}"
    )
    if write is not None:
        write.write_text(_config_yaml(best))
        console.print(f"config written to {write} (deploy: pdserve up --config {write})")
    if write_helm is not None:
        _write_helm(write_helm, best, console)


def itl_bound_s(max_itl_p99_s: float | None, base: PdserveConfig) -> float | None:
    """The ITL p99 bound: `max_itl_p99_s` when given (0: no bound), else the base config's
    per-step budget router.routing.itl_slo_s plus its stream interval (a client's gap is up
    to the interval plus one step; None when the guard is off)."""
    if max_itl_p99_s is None:
        budget = base.router.routing.itl_slo_s
        if budget is None:
            return None
        return budget + base.router.stream_batch_interval_ms / 1000
    return max_itl_p99_s or None


def _bound_note(bound_s: float | None) -> str:
    return "" if bound_s is None else f" (bound {sig3(bound_s)} s)"


def _table(
    ranked: list[Ranked],
    slo_ttft_s: float,
    slo_tpot_s: float,
    target: float,
    max_itl_p99_s: float | None,
) -> Table:
    itl = "" if max_itl_p99_s is None else f"; ITL p99 <= {sig3(max_itl_p99_s)} s ('>': over)"
    table = Table(
        title="candidates, best first (predicted by the simulator)",
        caption=f"goodput: TTFT <= {slo_ttft_s} s and TPOT <= {slo_tpot_s} s; target {target:.0%}"
        f"{itl}; TTFT p99s within {P99_TIE:.0%} of each other rank by TTFT p50 (with request "
        "classes: the geometric mean of the classes' p50s, below)",
    )
    for col in ("#", "layout", "devices", "TTFT p50", "TTFT p90", "TTFT p99", "ITL p50",
                "ITL p90", "ITL p99", "TPOT p50", "req/s", "goodput"):  # fmt: skip
        table.add_column(col, justify="left" if col == "layout" else "right")
    for i, r in enumerate(ranked, start=1):
        m = r.prediction.metrics
        over = max_itl_p99_s is not None and (m.itl_p99_s is None or m.itl_p99_s > max_itl_p99_s)
        table.add_row(
            str(i), r.candidate.label(), str(r.candidate.num_devices), sig3(m.ttft_p50_s),
            sig3(m.ttft_p90_s), sig3(m.ttft_p99_s), sig3(m.itl_p50_s), sig3(m.itl_p90_s),
            sig3(m.itl_p99_s) + (" >" if over else ""), sig3(m.tpot_p50_s),
            sig3(m.requests_per_s), f"{(m.goodput_fraction or 0):.1%}",
        )  # fmt: skip
    return table


def _class_table(ranked: list[Ranked]) -> Table:
    """The same candidates' TTFT per request class (p50 / p99, seconds) and the typical TTFT
    that breaks their ties."""
    names = sorted(ranked[0].prediction.classes)
    table = Table(title="TTFT per request class, same order (p50 / p99, s)")
    for col in ("#", "layout", *names, "typical (geo. mean of p50s)"):
        table.add_column(col, justify="left" if col == "layout" else "right")
    for i, r in enumerate(ranked, start=1):
        cells = []
        for name in names:
            m = r.prediction.classes.get(name)
            cells.append("-" if m is None else f"{sig3(m.ttft_p50_s)} / {sig3(m.ttft_p99_s)}")
        table.add_row(str(i), r.candidate.label(), *cells, sig3(typical_ttft_s(r.prediction)))
    return table


def _config_yaml(best: Ranked) -> str:
    data: dict[str, Any] = best.config.model_dump(mode="json", exclude_defaults=True)
    c = best.candidate
    header = (
        f"# Recommended by `pdserve tune`: {c.label()}.\n# mode {c.mode}, "
        f"{c.num_prefill} prefill + {c.num_decode} decode replica(s), prefill chunk "
        f"{c.chunk_tokens or 'whole'}, local_prefill_max_cold_tokens "
        f"{c.local_prefill_max_cold_tokens}; keys at their defaults are left out.\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False)


def helm_values(best: Ranked) -> dict[str, Any]:
    """Values for the Helm chart: the pools' replica counts and engine knobs under `pdserve`,
    and one worker-group pod per replica. Raises ValueError for an aggregated layout (the
    chart deploys disaggregated pools only)."""
    c = best.candidate
    if c.mode == "aggregated":
        raise ValueError("the Helm chart deploys prefill and decode pools only: aggregated "
                         "layouts run with `pdserve up` (use --write)")  # fmt: skip
    cfg = best.config
    local = c.local_prefill_max_cold_tokens

    def pool(name: str) -> dict[str, Any]:
        p = cfg.prefill if name == "prefill" else cfg.decode
        return {
            "num_replicas": p.num_replicas,
            "autoscaling": None,
            "engine": {"prefill_chunk_tokens": p.engine.prefill_chunk_tokens},
        }

    return {
        "pdserve": {
            "prefill": pool("prefill"),
            "decode": pool("decode"),
            "router": {"routing": {"local_prefill_max_cold_tokens": local}},
        },
        "prefill": {"replicas": c.num_prefill, "minReplicas": c.num_prefill,
                    "maxReplicas": c.num_prefill},
        "decode": {"replicas": c.num_decode, "minReplicas": c.num_decode,
                   "maxReplicas": c.num_decode},
    }  # fmt: skip


def _write_helm(path: pathlib.Path, best: Ranked, console: Console) -> None:
    try:
        values = helm_values(best)
    except ValueError as exc:
        console.print(f"[red]no Helm values:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    header = f"# Recommended by `pdserve tune`: {best.candidate.label()}; merge onto your values\n"
    path.write_text(header + yaml.safe_dump(values, sort_keys=False))
    console.print(f"Helm values written to {path} (helm upgrade ... -f {path})")
