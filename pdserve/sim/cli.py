"""`pdserve simulate` (typer): predict deployments' latency for a workload with the
simulator, and with --measured set the prediction beside a `pdserve bench` report.

Registered in pdserve/cli.py. Exit status: 0 done; 1 a prediction is outside --tolerance of
the measurement (with --measured and --check); 2 bad options, config or file.
"""

from __future__ import annotations

import json
import pathlib
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pdserve.bench.cli import _opt
from pdserve.bench.config import BenchConfig
from pdserve.bench.report import BenchReport, StageStats
from pdserve.bench.rounds import one_value_holds_all, spread
from pdserve.bench.stats import sig3
from pdserve.bench.trace import TraceRecord, load_trace
from pdserve.config import ConfigError, load_config
from pdserve.sim.carry import carry_load, serving_speed_ratio
from pdserve.sim.fit import fit_host_contention, idle_steps_slower_than_run
from pdserve.sim.layout import SimLayout, layout_from_config
from pdserve.sim.predict import (
    ComparedRow,
    Prediction,
    StageRow,
    compare,
    compare_stages,
    predict,
)
from pdserve.sim.profile import SimProfile

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
P50_TOLERANCE = 0.15
P99_TOLERANCE = 0.30


def bound_of(row: ComparedRow) -> float | None:
    """The row's relative bound (p50 15 %, p99 30 %); None for rows the bound does not cover
    (other metrics; TTFT over all requests when the report has request classes: see
    ComparedRow.bounded)."""
    if not row.bounded or row.field not in ("ttft_p50_s", "itl_p50_s", "ttft_p99_s", "itl_p99_s"):
        return None
    return P50_TOLERANCE if row.field.endswith("p50_s") else P99_TOLERANCE


def within(row: ComparedRow) -> bool | None:
    """Whether a TTFT/ITL prediction is inside its bound (p50 +-15 %, p99 +-30 %); None for
    rows the bound does not cover (`bound_of`) or without both numbers."""
    bound = bound_of(row)
    if row.ratio is None or bound is None:
        return None
    return abs(row.ratio - 1) <= bound


def rounds_hold(row: ComparedRow) -> bool | None:
    """Whether one number can be within the row's bound of every round of the run (see
    pdserve.bench.rounds): False means the run's own rounds are further apart than the bound
    allows, so no prediction can meet it on both. None for unbounded rows or fewer than two
    rounds."""
    bound = bound_of(row)
    if bound is None or row.rounds is None:
        return None
    return one_value_holds_all(row.rounds, bound)


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
            "and TPOT, then predict every deployment with it."
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
    layouts = {}
    for name, path in names.items():
        try:
            layouts[name] = layout_from_config(load_config(path), name=name)
        except ConfigError as exc:
            console.print(f"[red]config error:[/red] {escape(str(exc))}")
            raise typer.Exit(2) from exc
    if fit_host_on is not None and load_from is not None:
        console.print("[red]error:[/red] --fit-host-on fits the load terms --load-from carries")
        raise typer.Exit(2)
    if fit_host_on is not None:
        prof = _fit_host(prof, report, layouts, fit_host_on, cfg, host_cores, console)
    if write_profile is not None:
        if fit_host_on is None and load_from is None:
            console.print("[red]error:[/red] --write-profile needs --fit-host-on or --load-from")
            raise typer.Exit(2)
        write_profile.write_text(prof.model_dump_json(indent=2) + "\n")
        console.print(f"profile written to {write_profile}")
    predictions = [predict(n, lay, prof, cfg, records, runs=runs) for n, lay in layouts.items()]
    console.print(_predictions_table(predictions, cfg))
    rows = compare(predictions, report) if report is not None else []
    stage_rows = compare_stages(predictions, report) if report is not None else []
    if stage_rows:
        console.print(_stages_table(stage_rows))
    if rows:
        console.print(_compared_table(rows))
        for line in rounds_summary(rows):
            console.print(line)
    if json_path is not None:
        doc = _json(prof, cfg, predictions, rows, stage_rows)
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
        console.print(f"[red]error:[/red] --fit-host-on {name}: needs --measured with that phase")
        raise typer.Exit(2)
    console.print(
        f"fitting the serving layer on {name} (a few hundred simulations of the "
        "measured workload; tens of seconds)..."
    )
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
        fitted = fit_host_contention(prof, layouts[name], cfg, measured, host_cores=host_cores)
    except ValueError as exc:
        console.print(f"[red]cannot fit host contention:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    console.print(
        f"host contention fitted on {name}: {fitted.host_contention:.2f} ({host_cores} host "
        f"cores); engine steps under load +{fitted.engine_step_extra_s * 1e3:.2f} ms, "
        f"host speed spread (log-normal sigma per 50 ms) {fitted.step_speed_sigma:.2f}"
    )
    local = fitted.local_jitter_sigma
    console.print(
        f"hop spreads (log-normal sigma): prefill path {fitted.serving_jitter_sigma:.2f}, decode "
        f"path {fitted.decode_jitter_sigma:.2f}, local prefills "
        f"{'as decode' if local is None else f'{local:.2f}'}; router "
        f"{fitted.router_s * 1e3:.1f} ms + {fitted.router_per_token_s * 1e6:.2f} us/token, "
        f"client {fitted.client_s * 1e3:.1f} ms + {fitted.client_per_token_s * 1e6:.2f} us/token "
        f"(spread {fitted.client_jitter_sigma:.2f})"
    )
    console.print(
        f"host stalls: {fitted.host_stall_rate_per_s:g} per second, median "
        f"{fitted.host_stall_median_s * 1e3:g} ms (log-normal sigma {fitted.host_stall_sigma:g})"
    )
    return fitted


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
        f"host stalls {carried.host_stall_rate_per_s:g} per second"
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


def _predictions_table(predictions: list[Prediction], cfg: BenchConfig) -> Table:
    table = Table(
        title=f"predicted: {cfg.workload} workload, {cfg.num_requests} requests, "
        f"rate {cfg.request_rate or 'closed loop'}, concurrency {cfg.concurrency}"
        f" ({predictions[0].runs if predictions else 1} simulated runs pooled)",
        caption=f"goodput: TTFT <= {cfg.slo_ttft_s} s and TPOT <= {cfg.slo_tpot_s} s",
    )
    table.add_column("metric")
    for p in predictions:
        table.add_column(f"{p.name}\n{p.layout.describe()}", justify="right")
    for label, field in (
        ("TTFT p50 (s)", "ttft_p50_s"), ("TTFT p99 (s)", "ttft_p99_s"),
        ("ITL p50 (s)", "itl_p50_s"), ("ITL p99 (s)", "itl_p99_s"),
        ("TPOT p50 (s)", "tpot_p50_s"), ("E2E p50 (s)", "e2e_p50_s"),
        ("E2E p99 (s)", "e2e_p99_s"), ("requests/s", "requests_per_s"),
        ("goodput", "goodput_fraction"),
    ):  # fmt: skip
        table.add_row(label, *(sig3(getattr(p.metrics, field)) for p in predictions))
    return table


def _ms(stats: StageStats | None) -> str:
    if stats is None or stats.p50_s is None:
        return "-"
    p99 = "-" if stats.p99_s is None else f"{stats.p99_s * 1e3:.0f}"
    return f"{stats.p50_s * 1e3:.0f} / {p99}"


def _stages_table(rows: list[StageRow]) -> Table:
    table = Table(
        title="pdserve's timeline, predicted vs measured (p50 / p99 ms)",
        caption="stages as the router records them (router/timeline.py); client_overhead: "
        "the client's TTFT minus the router's",
    )
    for col in ("deployment", "requests", "stage", "predicted", "measured"):
        table.add_column(col, justify="right" if col in ("predicted", "measured") else "left")
    for r in rows:
        table.add_row(r.deployment, r.scope, r.stage, _ms(r.predicted), _ms(r.measured))
    return table


def _compared_table(rows: list[ComparedRow]) -> Table:
    intervals = any(r.interval is not None for r in rows)
    rounds = any(r.rounds is not None for r in rows)
    caption = (
        "bound: TTFT and ITL p50 within 15 %, p99 within 30 % (TTFT per request class when the "
        "run has classes)"
    )
    if intervals:
        caption += (
            "; measured 95 %: the measured value's confidence interval from the run's requests "
            "(sampling noise only, not the machine's drift between runs); 'OUT, in noise': "
            "outside the bound, inside that interval"
        )
    if rounds:
        caption += (
            "; per round: the measured value of each of the run's rounds; 'rounds apart': "
            "they are further apart than the bound allows, so no single prediction can be "
            "within it of both"
        )
    table = Table(title="predicted vs measured (ratio = predicted / measured)", caption=caption)
    columns = ["deployment", "requests", "metric", "predicted", "measured"]
    columns += ["measured 95 %"] if intervals else []
    columns += ["per round"] if rounds else []
    for col in (*columns, "ratio", ""):
        numeric = col in ("predicted", "measured", "measured 95 %", "per round", "ratio")
        table.add_column(col, justify="right" if numeric else "left")
    for r in rows:
        cells = [r.deployment, r.scope, r.label, sig3(r.predicted), sig3(r.measured)]
        if intervals:
            cells.append("" if r.interval is None else "-".join(sig3(v) for v in r.interval))
        if rounds:
            cells.append("" if r.rounds is None else " / ".join(sig3(v) for v in r.rounds))
        table.add_row(*cells, sig3(r.ratio), _mark(r))
    return table


def _mark(row: ComparedRow) -> str:
    ok = within(row)
    if ok is None:
        return ""
    notes = ["ok" if ok else "[red]OUT[/red]"]
    if not ok and row.in_interval:
        notes.append("in noise")
    if rounds_hold(row) is False:
        notes.append("rounds apart")
    return ", ".join(notes)


def rounds_summary(rows: list[ComparedRow]) -> list[str]:
    """Lines on how far the run's rounds moved: each deployment's TPOT p50 per round (the
    host's decode speed as the client saw it) and the bounded cells whose rounds are further
    apart than their bound. Empty when the report has fewer than two rounds."""
    lines = []
    speeds = [r for r in rows if r.field == "tpot_p50_s" and r.scope == "all" and r.rounds]
    if speeds:
        parts = [
            f"{r.deployment} {' / '.join(f'{v * 1e3:.2f}' for v in r.rounds or ())} ms"
            f" (x{sig3(spread(r.rounds or ()))})"
            for r in speeds
        ]
        lines.append("TPOT p50 by round: " + ", ".join(parts))
    apart = [r for r in rows if rounds_hold(r) is False]
    held = [r for r in rows if rounds_hold(r) is not None]
    if held:
        names = ", ".join(f"{r.deployment} {r.scope} {r.label}" for r in apart) or "none"
        lines.append(
            f"cells whose rounds are further apart than the bound: {len(apart)} of {len(held)}"
            f" ({names})"
        )
    return lines


def _json(
    prof: SimProfile,
    cfg: BenchConfig,
    predictions: list[Prediction],
    rows: list[ComparedRow],
    stage_rows: list[StageRow],
) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "profile": prof.model_dump(mode="json"),
        "workload": cfg.model_dump(mode="json"),
        "predictions": {
            p.name: {
                "layout": p.layout.describe(),
                "metrics": p.metrics.model_dump(mode="json"),
                "classes": {c: m.model_dump(mode="json") for c, m in p.classes.items()},
            }
            for p in predictions
        },
        "compared": [
            {
                "deployment": r.deployment,
                "requests": r.scope,
                "field": r.field,
                "predicted": r.predicted,
                "measured": r.measured,
                "ratio": r.ratio,
                "within_bound": within(r),
                "measured_interval": None if r.interval is None else list(r.interval),
                "within_measured_interval": r.in_interval,
                "measured_rounds": None if r.rounds is None else list(r.rounds),
                "rounds_within_one_bound": rounds_hold(r),
            }
            for r in rows
        ],
        "stages": [
            {
                "deployment": r.deployment,
                "requests": r.scope,
                "stage": r.stage,
                "predicted": None if r.predicted is None else r.predicted.model_dump(mode="json"),
                "measured": None if r.measured is None else r.measured.model_dump(mode="json"),
            }
            for r in stage_rows
        ],
    }
