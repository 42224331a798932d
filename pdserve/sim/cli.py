"""`pdserve simulate` (typer): predict deployments' latency for a workload with the
simulator, and with --measured set the prediction beside a `pdserve bench` report.

Registered in pdserve/cli.py. Exit status: 0 done; 1 a prediction is outside its bound
(pdserve.sim.bounds) of the measurement (with --measured and --check); 2 bad options, config
or file.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from pdserve.bench.cli import _opt
from pdserve.bench.config import BenchConfig
from pdserve.bench.pool import pool_runs
from pdserve.bench.report import BenchReport, PolicyReport
from pdserve.bench.rounds import round_speed_sigma
from pdserve.bench.stats import sig3
from pdserve.bench.trace import TraceRecord, load_trace
from pdserve.config import ConfigError, load_config
from pdserve.sim.bounds import P50_TOLERANCE, P99_TOLERANCE, within
from pdserve.sim.carry import carry_load, serving_speed_ratio
from pdserve.sim.fit import fit_host_contention
from pdserve.sim.fit_engine import idle_steps_slower_than_run
from pdserve.sim.layout import SimLayout, layout_from_config
from pdserve.sim.pilot import PilotCheck, check_on_pilot
from pdserve.sim.predict import (
    compare,
    compare_stages,
    predict,
)
from pdserve.sim.profile import SimProfile
from pdserve.sim.render import (
    compared_table,
    predictions_table,
    rounds_summary,
    simulate_json,
    stages_table,
)

_NOT_WORKLOAD = (
    "profile", "config", "measured", "check", "json_path", "fit_host_on", "host_cores",
    "write_profile", "runs", "load_from",
)  # fmt: skip
LOAD_FROM_HELP = (
    "A profile fitted on another machine (`--fit-host-on ... --write-profile`): predict with "
    "--profile's idle engines and hops (this machine's `pdserve profile --sim-profile`) and "
    "that fit's serving-layer load terms, its times scaled by the two profiles' idle hop "
    "times."
)
RUNS_HELP = (
    "Simulate the workload this many times (different jitter draws) and pool the requests, so "
    "p99s are the model's and not one draw's. Default: enough runs for about 2,400 requests "
    "(8 for a 300-request workload, 1 from 2,400 on)."
)


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
    check: Annotated[
        bool,
        typer.Option(
            help="With --measured: exit 1 unless TTFT/ITL p50 are within 15 % and "
            "p99 within 30 % of the measurement (TTFT per request class when the run has "
            "classes)."
        ),
    ] = False,
    fit_host_on: Annotated[
        str | None,
        typer.Option(
            help="With --measured: first fit the host contention (how much slower the serving "
            "layer's hops get while engines occupy the host's cores; CPU machines), the hops' "
            "spreads and the engines' loaded step time on this deployment's measured timeline "
            "and TPOT (with the run's aggregated deployment, when it measured one, for a local "
            "prompt's intake per token, and the spread of all its rounds for the host's speed "
            "between rounds), then predict every deployment with it."
        ),
    ] = None,
    host_cores: Annotated[
        int, typer.Option(min=1, help="With --fit-host-on: cores the measured machine had.")
    ] = 2,
    load_from: Annotated[pathlib.Path | None, typer.Option(help=LOAD_FROM_HELP)] = None,
    write_profile: Annotated[
        pathlib.Path | None,
        typer.Option(
            help="With --fit-host-on or --load-from: save the profile predicted with (fitted, "
            "or carried)."
        ),
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
) -> None:
    """Predict TTFT / ITL / TPOT / E2E percentiles and goodput of deployments under a workload
    with the simulator (no cluster needed), optionally against a measured bench report."""
    options = {k: v for k, v in locals().items() if v is not None and k not in _NOT_WORKLOAD}
    console = Console()
    prof = _load_profile(profile, console, load_from)
    report = _load_report(measured, console) if measured is not None else None
    cfg = _bench_config(report, options, console)
    names = _deployments(config, report, console)
    records = _trace(cfg, console)
    layouts = _layouts(names, console)
    if fit_host_on is not None and load_from is not None:
        console.print("[red]error:[/red] --fit-host-on fits the load terms --load-from carries")
        raise typer.Exit(2)
    if fit_host_on is not None:
        prof = _fit_host(prof, report, layouts, fit_host_on, cfg, host_cores, console)
    if write_profile is not None:
        if fit_host_on is None and load_from is None:
            console.print("[red]error:[/red] --write-profile needs --fit-host-on or --load-from")
            raise typer.Exit(2)
        save_profile(prof, write_profile, console)
    predictions = [predict(n, lay, prof, cfg, records, runs=runs) for n, lay in layouts.items()]
    console.print(predictions_table(predictions, cfg))
    rows = compare(predictions, report) if report is not None else []
    stage_rows = compare_stages(predictions, report) if report is not None else []
    if stage_rows:
        console.print(stages_table(stage_rows))
    if rows:
        console.print(compared_table(rows))
        for line in rounds_summary(rows):
            console.print(line)
    if json_path is not None:
        doc = simulate_json(prof, cfg, predictions, rows, stage_rows)
        json_path.write_text(json.dumps(doc, indent=2) + "\n")
        console.print(f"JSON written to {json_path}")
    if check and rows:
        misses = [r for r in rows if within(r) is False]
        for r in misses:
            noise = " (inside the measured 95 % interval)" if r.in_interval else ""
            console.print(
                f"[red]outside the bound:[/red] {r.deployment} {r.scope} {r.label}: predicted "
                f"{sig3(r.predicted)}, measured {sig3(r.measured)} (x{sig3(r.ratio)}){noise}"
            )
        raise typer.Exit(1 if misses else 0)


def fit_on_run(
    prof: SimProfile,
    runs: Sequence[pathlib.Path],
    name: str | None,
    host_cores: int,
    console: Console,
) -> SimProfile:
    """`prof` fitted on the recorded runs at `runs` (`pdserve bench --json` reports whose
    deployments' configs are readable from here; several are pooled into one,
    pdserve.bench.pool) as `simulate --measured RUN --fit-host-on NAME` fits one; `name` None
    picks the run's first disaggregated deployment. Then says how many of the run's own
    TTFT/ITL cells the fit holds, and warns on a miss (pdserve.sim.pilot). Exits 2 with a
    message on an unreadable run or config, runs that cannot be pooled, or no deployment to
    fit on."""
    report = _load_report(runs[0], console)
    if len(runs) > 1:
        try:
            report = pool_runs([report, *(_load_report(r, console) for r in runs[1:])])
        except ValueError as exc:
            console.print(f"[red]error:[/red] cannot pool the runs: {escape(str(exc))}")
            raise typer.Exit(2) from exc
        console.print(
            f"pooled {len(runs)} runs ({report.config['rounds']} rounds) into one to fit on"
        )
    run = ", ".join(str(r) for r in runs)
    if not report.config.get("deployments"):
        console.print(
            f"[red]error:[/red] {run} records no deployment configs (benched with --url): bench "
            "the pilot with `pdserve bench --deployments NAME=CONFIG,...` so the fit knows "
            "each layout"
        )
        raise typer.Exit(2)
    layouts = _layouts(_deployments(None, report, console), console)
    if name is None:
        name = next((n for n, lay in layouts.items() if not lay.aggregated), None)
        if name is None:
            console.print(
                f"[red]error:[/red] {run} measured no disaggregated deployment to fit on; "
                "name one with --fit-host-on"
            )
            raise typer.Exit(2)
    cfg = _bench_config(report, {}, console)
    fitted = _fit_host(prof, report, layouts, name, cfg, host_cores, console)
    check = check_on_pilot(fitted, report, layouts, cfg, _trace(cfg, console))
    report_pilot_check(check, run, fitted, console)
    return fitted


def report_pilot_check(check: PilotCheck, run: str, fitted: SimProfile, console: Console) -> None:
    """Say how many of the pilot's own TTFT/ITL cells the fit holds; on a miss, warn with
    each missed cell."""
    if not check.misses:
        console.print(
            f"the fit holds all {check.cells} TTFT/ITL cells of the pilot itself (p50 within "
            f"{P50_TOLERANCE:.0%}, p99 within {P99_TOLERANCE:.0%})"
        )
        return
    stalls = (
        f" (fitted host stalls: {fitted.host_stall_rate_per_s:g} per second, median "
        f"{fitted.host_stall_median_s * 1e3:g} ms)"
        if fitted.host_stall_rate_per_s > 0
        else ""
    )
    console.print(
        f"[yellow]warning:[/yellow] the fit misses {len(check.misses)} of {check.cells} "
        f"TTFT/ITL cells of the pilot it was fitted on ({run}){stalls}: the simulator does not "
        "reproduce the pilot in these cells. Whether such misses foretell misses on the next "
        "run is not established (bench/RESULTS.md, runs AM to AP)"
    )
    for row in check.misses:
        console.print(
            f"  {row.deployment} {row.scope} {row.label}: predicted {sig3(row.predicted)}, "
            f"measured {sig3(row.measured)} (x{sig3(row.ratio)})"
        )


def save_profile(prof: SimProfile, path: pathlib.Path, console: Console) -> None:
    """Write `prof` (a fitted or carried profile) to `path` as JSON, for --profile or
    --load-from later."""
    path.write_text(prof.model_dump_json(indent=2) + "\n")
    console.print(f"profile written to {path}")


def _layouts(names: dict[str, pathlib.Path], console: Console) -> dict[str, SimLayout]:
    """Each named deployment's simulated layout, from its config file (exit 2 on a bad one)."""
    layouts = {}
    for name, path in names.items():
        try:
            layouts[name] = layout_from_config(load_config(path), name=name)
        except ConfigError as exc:
            console.print(f"[red]config error:[/red] {name}={path}: {escape(str(exc))}")
            raise typer.Exit(2) from exc
    return layouts


def _fit_host(
    prof: SimProfile,
    report: BenchReport | None,
    layouts: dict[str, SimLayout],
    name: str,
    cfg: BenchConfig,
    host_cores: int,
    console: Console,
) -> SimProfile:
    measured = report.policies.get(name) if report is not None else None
    if measured is None or name not in layouts:
        have = ", ".join(report.policies) if report is not None else "none"
        console.print(
            f"[red]error:[/red] --fit-host-on {name}: needs a measured run with that deployment "
            f"(the run's: {have})"
        )
        raise typer.Exit(2)
    console.print(
        f"fitting the serving layer on {name} (a few hundred simulations of the "
        "measured workload; tens of seconds)..."
    )
    between_rounds = round_speed_sigma(report.policies.values()) if report is not None else None
    lengths = _aggregated_deployment(report, layouts) if report is not None else None
    slower = idle_steps_slower_than_run(prof, layouts[name], cfg, measured)
    if slower is not None:
        console.print(
            f"[yellow]warning:[/yellow] the run decoded faster than this profile's idle engines "
            f"(TPOT p50 {slower[1] * 1e3:.2f} ms measured on {name}, "
            f"{slower[0] * 1e3:.2f} ms simulated with the idle steps alone): the profile was "
            "taken while the host was slower than during the run, and the fit cannot make up "
            "for it; take a new one (`pdserve profile --sim-profile`) and fit again"
        )
    try:
        fitted = fit_host_contention(
            prof,
            layouts[name],
            cfg,
            measured,
            host_cores=host_cores,
            round_speed_sigma=between_rounds,
            local_lengths=lengths,
        )
    except ValueError as exc:
        console.print(f"[red]cannot fit host contention:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    console.print(
        f"host contention fitted on {name}: {fitted.host_contention:.2f} ({host_cores} host "
        f"cores); engine steps under load +{fitted.engine_step_extra_s * 1e3:.2f} ms, "
        f"host speed spread (log-normal sigma per 50 ms) {fitted.step_speed_sigma:.2f}, "
        f"prompt tokens x{fitted.prefill_step_factor:.2f}, a local prompt's fixed cost "
        f"x{fitted.local_prefill_load_factor:.2f} ({fitted.loaded_prompt_fixed_s() * 1e3:.2f} ms), "
        f"a local request's hop x{fitted.local_hop_load_factor:.2f} "
        f"({fitted.loaded_local_hop_s() * 1e3:.2f} ms)"
    )
    local = fitted.local_jitter_sigma
    console.print(
        f"a local prompt's intake at its replica: {fitted.local_intake_per_token_s * 1e6:.2f} "
        "us/token, one prompt at a time per replica "
        + (
            f"(fitted on {lengths[0].name}'s request classes)"
            if lengths is not None
            else "(the run has no aggregated deployment to fit it on: the profile's kept)"
        )
    )
    console.print(
        f"hop spreads (log-normal sigma): prefill path {fitted.serving_jitter_sigma:.2f}, decode "
        f"path {fitted.decode_jitter_sigma:.2f}, local prefills "
        f"{'as decode' if local is None else f'{local:.2f}'}; router "
        f"{fitted.router_s * 1e3:.1f} ms + {fitted.router_per_token_s * 1e6:.2f} us/token, "
        f"client {fitted.client_s * 1e3:.1f} ms + {fitted.client_per_token_s * 1e6:.2f} us/token "
        f"(spread {fitted.client_jitter_sigma:.2f}); serving-layer intake "
        f"{fitted.intake_s(1000) * 1e3:.1f} ms per 1,000 prompt tokens on average, spread as "
        "the client's (others' first chunks wait it out)"
    )
    console.print(
        f"host stalls: {fitted.host_stall_rate_per_s:g} per second, median "
        f"{fitted.host_stall_median_s * 1e3:g} ms (log-normal sigma {fitted.host_stall_sigma:g}); "
        f"host speed between rounds: log-normal sigma {fitted.round_speed_sigma:.3f}"
        + ("" if between_rounds is not None else " (the run has one round: the profile's kept)")
    )
    return fitted


def _aggregated_deployment(
    report: BenchReport, layouts: dict[str, SimLayout]
) -> tuple[SimLayout, PolicyReport] | None:
    """The run's first aggregated deployment (layout, measured): its engines prefill every
    class themselves, so its classes' hops tell a local prompt's intake per token. None when
    the run measured none."""
    for name, layout in layouts.items():
        measured = report.policies.get(name)
        if layout.aggregated and measured is not None:
            return layout, measured
    return None


def _load_profile(
    path: pathlib.Path, console: Console, load_from: pathlib.Path | None = None
) -> SimProfile:
    """The profile at `path`; with `load_from`, carrying that fitted profile's load terms."""
    try:
        prof = SimProfile.load(path)
        if load_from is None:
            return prof
        fitted = SimProfile.load(load_from)
        carried = carry_load(fitted, prof)
        ratio = serving_speed_ratio(fitted, prof)
    except ValueError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    console.print(
        f"load terms carried from {load_from}, serving times x{ratio:.2f}: host contention "
        f"{carried.host_contention:.2f}, engine steps under load "
        f"+{carried.engine_step_extra_s * 1e3:.2f} ms, client "
        f"{carried.client_s * 1e3:.1f} ms + {carried.client_per_token_s * 1e6:.2f} us/token, "
        f"intake {carried.intake_s(1000) * 1e3:.1f} ms per 1,000 prompt tokens, "
        f"host stalls {carried.host_stall_rate_per_s:g} per second, a local prompt's fixed "
        f"cost x{carried.local_prefill_load_factor:.2f}, a local request's hop "
        f"x{carried.local_hop_load_factor:.2f}, host speed between rounds sigma "
        f"{carried.round_speed_sigma:.3f}, a local prompt's intake "
        f"{carried.local_intake_per_token_s * 1e6:.2f} us/token"
    )
    return carried


def _load_report(path: pathlib.Path, console: Console) -> BenchReport:
    try:
        return BenchReport.model_validate_json(path.read_text())
    except (OSError, ValueError) as exc:
        console.print(f"[red]error:[/red] {path}: not a pdserve bench report ({exc})")
        raise typer.Exit(2) from exc


def _bench_config(
    report: BenchReport | None, options: dict[str, Any], console: Console
) -> BenchConfig:
    """The workload: the report's own options (over which explicit options win), else the
    options given."""
    base: dict[str, Any] = {}
    if report is not None:
        base = {**report.config, "deployments": (), "policies": (), "json_path": None}
    try:
        return BenchConfig.model_validate({**base, **options})
    except ValueError as exc:
        console.print(f"[red]invalid workload options:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc


def _deployments(
    given: list[str] | None, report: BenchReport | None, console: Console
) -> dict[str, pathlib.Path]:
    items = list(given or [])
    if not items and report is not None:
        items = list(report.config.get("deployments") or [])
    if not items:
        console.print("[red]error:[/red] name a deployment: --config NAME=CONFIG (or --measured)")
        raise typer.Exit(2)
    out: dict[str, pathlib.Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = pathlib.Path(item).stem, item
        out[name] = pathlib.Path(path)
    return out


def _trace(cfg: BenchConfig, console: Console) -> list[TraceRecord]:
    if cfg.workload != "trace" or cfg.trace is None:
        return []
    try:
        return load_trace(cfg.trace)
    except (OSError, ValueError) as exc:
        console.print(f"[red]cannot read trace {cfg.trace}:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
