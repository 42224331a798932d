"""What `pdserve simulate`, `pdserve tune` and `pdserve sim-check` share (typer adapters):
reading profiles, bench reports, deployment configs and traces with errors a user can act on
(exit status 2 and a message), and fitting the `cpu_host` block on a measured run with a
summary of what was fitted."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import BenchReport, PolicyReport
from pdserve.bench.rounds import round_speed_sigma
from pdserve.bench.trace import TraceRecord, load_trace
from pdserve.config import ConfigError, load_config
from pdserve.sim.fit import fit_host_contention
from pdserve.sim.fit_engine import idle_steps_slower_than_run
from pdserve.sim.layout import SimLayout, layout_from_config
from pdserve.sim.profile import SimProfile

RUNS_HELP = (
    "Simulate the workload this many times and pool the requests (with a cpu_host block: "
    "different draws of the host's spreads and speeds, so p99s are the model's and not one "
    "draw's). Default: enough runs for about 2,400 requests (8 for a 300-request workload, 1 "
    "from 2,400 on)."
)
HOST_CORES_HELP = "Cores of the machine the run was measured on (default: this machine's)."


def this_machine_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def load_profile(path: pathlib.Path, console: Console) -> SimProfile:
    try:
        return SimProfile.load(path)
    except ValueError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc


def save_profile(prof: SimProfile, path: pathlib.Path, console: Console) -> None:
    """Write `prof` to `path` as JSON, for --profile later."""
    path.write_text(prof.model_dump_json(indent=2, exclude_none=False) + "\n")
    console.print(f"profile written to {path}")


def load_report(path: pathlib.Path, console: Console) -> BenchReport:
    try:
        return BenchReport.model_validate_json(path.read_text())
    except (OSError, ValueError) as exc:
        console.print(f"[red]error:[/red] {path}: not a pdserve bench report ({exc})")
        raise typer.Exit(2) from exc


def bench_config(
    report: BenchReport | None, options: dict[str, Any], console: Console
) -> BenchConfig:
    """The workload: the report's own options (over which explicit options win), else the
    options given."""
    base: dict[str, Any] = {}
    if report is not None:
        base = {
            **report.config,
            "deployments": (),
            "policies": (),
            "json_path": None,
            "report_dir": None,
        }
    try:
        return BenchConfig.model_validate({**base, **options})
    except ValueError as exc:
        console.print(f"[red]invalid workload options:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc


def deployments(
    given: list[str] | None, report: BenchReport | None, console: Console
) -> dict[str, pathlib.Path]:
    """NAME -> config path, from NAME=CONFIG (or CONFIG, named by its stem) items, else the
    report's `--deployments`."""
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


def layouts(names: dict[str, pathlib.Path], console: Console) -> dict[str, SimLayout]:
    """Each named deployment's simulated layout, from its config file (exit 2 on a bad one)."""
    out = {}
    for name, path in names.items():
        try:
            out[name] = layout_from_config(load_config(path), name=name)
        except ConfigError as exc:
            console.print(f"[red]config error:[/red] {name}={path}: {escape(str(exc))}")
            raise typer.Exit(2) from exc
    return out


def trace_records(cfg: BenchConfig, console: Console) -> list[TraceRecord]:
    if cfg.workload != "trace" or cfg.trace is None:
        return []
    try:
        return load_trace(cfg.trace)
    except (OSError, ValueError) as exc:
        console.print(f"[red]cannot read trace {cfg.trace}:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc


def fit_host(
    prof: SimProfile,
    report: BenchReport,
    run_layouts: dict[str, SimLayout],
    name: str | None,
    host_cores: int | None,
    console: Console,
) -> SimProfile:
    """`prof` with a `cpu_host` block fitted on deployment `name` of the measured `report`
    (None: its first disaggregated one), the run's aggregated deployment (if any) fitting a
    local prompt's intake; prints what was fitted. Exits 2 when the run lacks the deployment
    or cannot be fitted on."""
    if name is None:
        name = next((n for n, lay in run_layouts.items() if not lay.aggregated), None)
    measured = report.policies.get(name) if name is not None else None
    if name is None or measured is None or name not in run_layouts:
        console.print(
            f"[red]error:[/red] fitting the host needs a measured disaggregated deployment "
            f"(asked for: {name or 'any'}; the run has: {', '.join(report.policies) or 'none'})"
        )
        raise typer.Exit(2)
    cfg = bench_config(report, {}, console)
    cores = host_cores or this_machine_cores()
    console.print(f"fitting the CPU host on {name} (a few hundred simulations; tens of seconds)...")
    slower = idle_steps_slower_than_run(prof, run_layouts[name], cfg, measured)
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
            run_layouts[name],
            cfg,
            measured,
            host_cores=cores,
            round_speed_sigma=round_speed_sigma(report.policies.values()),
            local_lengths=_aggregated_deployment(report, run_layouts),
        )
    except ValueError as exc:
        console.print(f"[red]cannot fit the host:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    _describe_host(fitted, name, cores, console)
    return fitted


def _describe_host(fitted: SimProfile, name: str, cores: int, console: Console) -> None:
    h = fitted.host
    console.print(
        f"CPU host fitted on {name} ({cores} cores): hop contention {h.host_contention:.2f}; "
        f"engine steps +{h.engine_step_extra_s * 1e3:.2f} ms, speed spread "
        f"{h.step_speed_sigma:.2f} per 50 ms and {h.round_speed_sigma:.3f} between rounds; "
        f"prompt tokens x{h.prefill_step_factor:.2f}; a local prompt's fixed cost "
        f"x{h.local_prefill_load_factor:.2f}, its hop x{h.local_hop_load_factor:.2f}, its "
        f"intake {h.local_intake_per_token_s * 1e6:.2f} us/token"
    )
    console.print(
        f"hop spreads (log-normal sigma): prefill path {h.serving_jitter_sigma:.2f}, decode "
        f"path {h.decode_jitter_sigma:.2f}, local prefills {h.local_sigma():.2f}; client "
        f"{h.client_s * 1e3:.1f} ms + {h.client_per_token_s * 1e6:.2f} us/token (spread "
        f"{h.client_jitter_sigma:.2f}); host stalls {h.host_stall_rate_per_s:g} per second, "
        f"median {h.host_stall_median_s * 1e3:g} ms"
    )


def _aggregated_deployment(
    report: BenchReport, run_layouts: dict[str, SimLayout]
) -> tuple[SimLayout, PolicyReport] | None:
    """The run's first aggregated deployment (layout, measured): its engines prefill every
    class themselves, so its classes' hops tell a local prompt's intake per token."""
    for name, layout in run_layouts.items():
        measured = report.policies.get(name)
        if layout.aggregated and measured is not None:
            return layout, measured
    return None
