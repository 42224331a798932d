"""`pdserve sim-check` (typer): the simulator's ratio/rank check in one command.

For each workload it runs `pdserve bench --deployments` over the given layouts (each started
and stopped by the bench, one at a time), predicts the same layouts with the simulator, and
prints, per layout against the baseline layout, the predicted and measured ratios of TTFT
(p50, p99, per request class) and ITL p99, and whether the layout `pdserve tune` would
recommend is the measured best (pdserve/sim/check.py). The profile is measured first on the
first disaggregated layout unless `--profile` is given. Everything it measures goes to --out
(bench reports, the profile, check.json); `--reuse` reads them instead of measuring again.

Registered in pdserve/cli.py. Exit status: 0 done (a miss is a finding, not a failure); 1 a
deployment did not start or a bench failed; 2 bad options or files.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import pathlib
from dataclasses import asdict
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from pdserve.bench.config import BenchConfig
from pdserve.bench.main import run_bench
from pdserve.bench.peers.pdserve_setup import PdserveSetup
from pdserve.bench.peers.setups import Ports, SetupError
from pdserve.bench.report import BenchReport
from pdserve.config import ConfigError, PdserveConfig, load_config
from pdserve.sim.check import RankRow, RatioRow, rank_row, ratio_rows, summarize
from pdserve.sim.check_render import rank_table, ratio_table, summary_lines
from pdserve.sim.cli_common import (
    fit_host,
    layouts,
    load_profile,
    load_report,
    save_profile,
    trace_records,
)
from pdserve.sim.predict import Prediction, predict
from pdserve.sim.profile import SimProfile

DEFAULT_DEPLOYMENTS = (
    "aggregated=deploy/local-aggregated.yaml,1p1d=deploy/local.yaml,2p1d=deploy/local-2p1d.yaml"
)
WORKLOADS: dict[str, dict[str, Any]] = {
    "mixed": {
        "workload": "mixed", "num_requests": 200, "request_rate": 4.0, "concurrency": 32,
    },
    "synthetic": {
        "workload": "synthetic", "num_requests": 150, "request_rate": 3.0, "concurrency": 32,
        "input_dist": "uniform:1000:3000", "output_dist": "uniform:16:64",
    },
    "trace": {
        "workload": "trace", "max_requests": 300, "trace_length_scale": 0.05,
        "trace_time_scale": 0.01, "max_input_tokens": 3500, "max_output_tokens": 64,
        "concurrency": 24,
    },
}  # fmt: skip
"""The workloads the check knows: mixed short and long prompts with the long ones in bursts,
synthetic long prompts (1,000-3,000 tokens, Poisson arrivals), and a Mooncake-format trace
(scaled to a small model: lengths x0.05, arrival gaps x0.01). Each is sized to take about a
minute per layout on a 2-core CPU machine, and keeps fewer requests in flight than the local
configs admit (router.admission.max_inflight_requests 32): the simulator models no 429s, and
a refused request would count against its layout's goodput."""
ENGINES = "engines"
CPU_HOST = "engines + cpu host"
"""Profile labels: the idle profile as measured, and with a cpu_host block fitted."""


def sim_check(
    out: Annotated[
        pathlib.Path,
        typer.Option(help="Folder for the bench reports, the profile and check.json."),
    ],
    deployments: Annotated[
        str,
        typer.Option(
            help="NAME=CONFIG pairs to compare, comma-separated; the first is the "
            "baseline of every ratio."
        ),
    ] = DEFAULT_DEPLOYMENTS,
    workloads: Annotated[
        str, typer.Option(help=f"Comma-separated, of: {', '.join(WORKLOADS)}.")
    ] = "mixed,synthetic,trace",
    trace: Annotated[
        pathlib.Path | None,
        typer.Option(help="Mooncake-format JSONL trace (needed by the trace workload)."),
    ] = None,
    profile: Annotated[
        pathlib.Path | None,
        typer.Option(
            help="A simulator profile to predict with (default: measure one first on "
            "the first disaggregated deployment)."
        ),
    ] = None,
    fit_host_on: Annotated[
        str | None,
        typer.Option(
            help="Also predict with a cpu_host block fitted on this deployment of the "
            "first workload's run (CPU machines; fitted once, used for every "
            "workload)."
        ),
    ] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds of each bench.")] = 1,
    reuse: Annotated[
        bool,
        typer.Option(
            "--reuse",
            help="Read reports and the profile already in --out instead of measuring them again.",
        ),
    ] = False,
    report_dir: Annotated[
        pathlib.Path | None,
        typer.Option(
            "--report",
            help="Write an HTML report of the predicted and measured ratios (index.html, "
            "opens offline) and the JSON it was drawn from into this folder.",
        ),
    ] = None,
) -> None:
    """Check the simulator's predicted ratios between layouts and its recommended layout
    against layouts measured side by side (ratios and ranks, not absolute times)."""
    console = Console()
    names = _parse_deployments(deployments, console)
    chosen = [w.strip() for w in workloads.split(",") if w.strip()]
    unknown = [w for w in chosen if w not in WORKLOADS]
    if unknown or not chosen:
        console.print(f"[red]error:[/red] unknown workloads {unknown}; known: {list(WORKLOADS)}")
        raise typer.Exit(2)
    if "trace" in chosen and (trace is None or not trace.is_file()):
        console.print("[red]error:[/red] the trace workload needs --trace PATH (a JSONL file)")
        raise typer.Exit(2)
    configs = _configs(names, console)
    out.mkdir(parents=True, exist_ok=True)
    run_layouts = layouts(names, console)
    prof = _profile(profile, out, reuse, names, configs, console)
    reports = {w: _bench(w, names, trace, rounds, out, reuse, console) for w in chosen}
    profiles = {ENGINES: prof}
    if fit_host_on is not None:
        first = next((w for w in chosen if w != "trace"), None)
        if first is None:
            console.print("[red]error:[/red] --fit-host-on needs a mixed or synthetic workload")
            raise typer.Exit(2)
        fitted = fit_host(prof, reports[first], run_layouts, fit_host_on, None, console)
        save_profile(fitted, out / "sim-profile-cpu-host.json", console)
        profiles[CPU_HOST] = fitted
    baseline = next(iter(names))
    ratios: list[RatioRow] = []
    ranks: list[RankRow] = []
    for w, report in reports.items():
        cfg = BenchConfig.model_validate(
            {
                **report.config,
                "deployments": (),
                "policies": (),
                "json_path": None,
                "report_dir": None,
            }
        )
        records = trace_records(cfg, console)
        predicted: dict[str, dict[str, Prediction]] = {
            label: {n: predict(n, lay, p, cfg, records) for n, lay in run_layouts.items()}
            for label, p in profiles.items()
        }
        ratios += ratio_rows(w, baseline, report.policies, predicted)
        devices = {n: lay.num_devices for n, lay in run_layouts.items()}
        ranks.append(rank_row(w, report.policies, predicted, devices, target_goodput=0.99))
    console.print(ratio_table(ratios, list(profiles)))
    console.print(rank_table(ranks, list(profiles)))
    summaries = [summarize(label, ratios, ranks) for label in profiles]
    for line in summary_lines(summaries):
        console.print(line)
    doc = {
        "schema_version": 1,
        "date": datetime.date.today().isoformat(),
        "deployments": {n: str(p) for n, p in names.items()},
        "profiles": {label: p.model_dump(mode="json") for label, p in profiles.items()},
        "workloads": {w: r.config for w, r in reports.items()},
        "ratios": [asdict(r) for r in ratios],
        "ranks": [asdict(r) for r in ranks],
        "summary": [asdict(s) for s in summaries],
    }
    (out / "check.json").write_text(json.dumps(doc, indent=2) + "\n")
    console.print(f"check written to {out / 'check.json'}")
    if report_dir is not None:
        from pdserve.report.cli import write_page_report
        from pdserve.report.predicted_page import check_page

        write_page_report(check_page(doc), doc, report_dir, console)


def _parse_deployments(text: str, console: Console) -> dict[str, pathlib.Path]:
    names: dict[str, pathlib.Path] = {}
    for item in (i.strip() for i in text.split(",") if i.strip()):
        name, sep, path = item.partition("=")
        if not sep or not name or name in names:
            console.print(
                f"[red]error:[/red] --deployments wants distinct NAME=CONFIG, got {item!r}"
            )
            raise typer.Exit(2)
        names[name] = pathlib.Path(path)
    if len(names) < 2:
        console.print("[red]error:[/red] --deployments needs at least two layouts to compare")
        raise typer.Exit(2)
    return names


def _configs(names: dict[str, pathlib.Path], console: Console) -> dict[str, PdserveConfig]:
    out = {}
    for name, path in names.items():
        try:
            out[name] = load_config(path)
        except ConfigError as exc:
            console.print(f"[red]config error:[/red] {name}={path}: {escape(str(exc))}")
            raise typer.Exit(2) from exc
    return out


def _profile(
    given: pathlib.Path | None,
    out: pathlib.Path,
    reuse: bool,
    names: dict[str, pathlib.Path],
    configs: dict[str, PdserveConfig],
    console: Console,
) -> SimProfile:
    """The profile given, the one in --out (with --reuse), else one measured now on the first
    disaggregated deployment."""
    saved = out / "sim-profile.json"
    if given is not None:
        return load_profile(given, console)
    if reuse and saved.is_file():
        console.print(f"profile: {saved} (reused)")
        return load_profile(saved, console)
    name = next((n for n, c in configs.items() if not c.aggregated), None)
    if name is None:
        console.print("[red]error:[/red] no disaggregated deployment to profile: give --profile")
        raise typer.Exit(2)
    from pdserve.sim.measure_profile import measure_sim_profile

    console.print(f"profiling the engines of {name} ({names[name]}) on an idle cluster...")
    setup = PdserveSetup(
        names[name], configs[name].model.served_model_name, Ports(), _log_dir(out, "profile"),
        lambda line: console.print(f"  {escape(line)}"), name=name,
    )  # fmt: skip
    try:
        setup.start()
        prof = asyncio.run(measure_sim_profile(setup.url, configs[name], console))
    except (SetupError, ValueError) as exc:
        console.print(f"[red]profiling failed:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    finally:
        setup.stop()
    save_profile(prof, saved, console)
    return prof


def _bench(
    workload: str,
    names: dict[str, pathlib.Path],
    trace: pathlib.Path | None,
    rounds: int,
    out: pathlib.Path,
    reuse: bool,
    console: Console,
) -> BenchReport:
    """One workload's bench report: read from --out with --reuse, else measured now."""
    path = out / f"{workload}.json"
    if reuse and path.is_file():
        console.print(f"{workload}: {path} (reused)")
        return load_report(path, console)
    options: dict[str, Any] = {
        **WORKLOADS[workload],
        "deployments": tuple(f"{n}={p}" for n, p in names.items()),
        "rounds": rounds,
        "json_path": path,
    }
    if workload == "trace":
        options["trace"] = trace
    console.rule(f"{workload}: {len(names)} deployments, {rounds} round(s)")
    if run_bench(BenchConfig.model_validate(options), console) != 0 or not path.is_file():
        console.print(f"[red]the {workload} bench failed[/red]")
        raise typer.Exit(1)
    return load_report(path, console)


def _log_dir(out: pathlib.Path, name: str) -> pathlib.Path:
    path = out / "logs" / name
    path.mkdir(parents=True, exist_ok=True)
    return path
