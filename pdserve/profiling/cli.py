"""`pdserve profile` (typer): measure the running cluster, fit the cost model, show the
fit, and print (or with --write, save) the `router.routing.cost_model` block.

Registered in pdserve/cli.py. Exit status: 0 done; 1 measuring or fitting failed (cluster
unreachable or not ready, HTTP error, samples that cannot determine the model); 2 bad
options or config file (including a result that would not validate).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as ProgressBar

from pdserve.config import ConfigError, PdserveConfig, load_config
from pdserve.profiling import render, report
from pdserve.profiling.measure import Measurements, Profiler, Progress
from pdserve.profiling.plan import ProfilePlan, make_plan
from pdserve.profiling.pool import ProfileSamples, fit_cost_model, pooled, read_report
from pdserve.profiling.samples import LocalPrefillSample, ProfileError
from pdserve.profiling.yaml_edit import snippet, update_config_text, write_atomic
from pdserve.router.policy.cost_model import CostModel, FitResult

if TYPE_CHECKING:
    from pdserve.sim.profile import SimProfile


def profile(
    url: Annotated[str, typer.Option(help="Router URL of the running cluster.")] = (
        "http://127.0.0.1:8000"
    ),
    config: Annotated[
        pathlib.Path | None,
        typer.Option(
            "--config",
            "-c",
            help="The cluster's pdserve YAML config: the cost model to compare "
            "against (default: built-in defaults) and the file --write updates.",
        ),
    ] = None,
    write: Annotated[
        bool, typer.Option("--write", help="Update router.routing.cost_model in --config.")
    ] = False,
    json_path: Annotated[
        pathlib.Path | None, typer.Option("--json", help="Write samples + coefficients here.")
    ] = None,
    sim_profile: Annotated[
        pathlib.Path | None,
        typer.Option(
            "--sim-profile",
            help="Also write the simulator's profile here (the fitted cost model plus the "
            "serving layer's hop, router and KV-transfer times): the input of `pdserve "
            "simulate` and `pdserve tune`.",
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model id to send (default: the first of /v1/models).")
    ] = None,
    max_prompt_tokens: Annotated[
        int, typer.Option(min=128, help="Longest prompt sent (also capped by the context).")
    ] = 3000,
    repeats: Annotated[int, typer.Option(min=1, help="Repeats of every sample point.")] = 3,
    quick: Annotated[bool, typer.Option(help="Fewer prompt lengths and batch sizes.")] = False,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed of the random prompt token ids (default: a new one each run: prompts "
            "the cluster has cached from an earlier run would prefill from its prefix cache "
            "or on the decode engine, and measure nothing)."
        ),
    ] = None,
    timeout_s: Annotated[
        float, typer.Option("--timeout", min=1, help="Per-request timeout, seconds.")
    ] = 120.0,
    pool: Annotated[
        list[pathlib.Path] | None,
        typer.Option(
            "--pool",
            help="An earlier run's --json report of the same model and hardware (repeatable): "
            "fit on its samples and this run's together. One profile measures one moment of "
            "the host; on a shared host, pooling profiles taken at different times gives "
            "steadier coefficients. --json still records this run's samples only.",
        ),
    ] = None,
) -> None:
    """Calibrate the router's cost model: measure prefill time vs prompt length (and cached
    prefix) and decode step time vs batch size on the running engines, fit the coefficients,
    and print the YAML block (or write it into --config with --write)."""
    console = Console()
    cfg = _load_config(config, write, console)
    base = cfg.router.routing.cost_model if cfg is not None else CostModel()
    try:
        plan = make_plan(
            quick=quick,
            repeats=repeats,
            max_prompt_tokens=max_prompt_tokens,
            max_model_len_tokens=cfg.model.max_model_len_tokens if cfg else 1 << 30,
            min_extra_tokens=cfg.router.routing.local_prefill_max_uncached_tokens if cfg else 0,
            min_prompt_tokens=cfg.router.routing.local_prefill_max_cold_tokens if cfg else 0,
        )
    except ValueError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    earlier = _read_pool(pool or [], console)
    measured, model_id = _measure(
        console,
        plan,
        lambda progress: Profiler(
            url, plan, model=model, seed=seed, timeout_s=timeout_s, progress=progress
        ),
    )
    this_run = ProfileSamples(
        source="this run",
        model=model_id,
        prefill=tuple(measured.prefill),
        decode=tuple(b.sample() for b in measured.batches),
        local_prefill=tuple(measured.local_prefill),
        serving=tuple(measured.serving),
    )
    try:
        samples = pooled([this_run, *earlier])
    except ValueError as exc:
        console.print(f"[red]error:[/red] cannot pool: {escape(str(exc))}")
        raise typer.Exit(2) from exc
    try:
        fit: FitResult = fit_cost_model(samples, base)
    except ValueError as exc:
        console.print(f"[red]cannot fit the cost model:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    new = _with_remote_fixed(fit.model, samples)
    _show(console, measured, base, new, fit.notes, samples)
    if earlier:
        _show_pool(console, [this_run, *earlier], new)
    if json_path is not None:
        doc = report.report_json(
            url=url,
            model_id=model_id,
            config=str(config) if config else None,
            prefill=measured.prefill,
            batches=measured.batches,
            old=base,
            new=new,
            notes=fit.notes,
            skipped_local_prefills=measured.skipped_local_prefills,
            local_prefill=measured.local_prefill,
            serving=measured.serving,
            pooled_with=[r.source for r in earlier],
        )
        try:
            json_path.write_text(json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            console.print(f"[red]cannot write {json_path}:[/red] {escape(str(exc))}")
            raise typer.Exit(1) from exc
        console.print(f"samples and coefficients written to {json_path}")
    if sim_profile is not None:
        _write_sim_profile(sim_profile, new, samples, url, console)
    pooled_text = f" of {len(earlier) + 1} runs" if earlier else ""
    comment = (
        f"fitted by `pdserve profile` on {datetime.date.today().isoformat()}: "
        f"{len(samples.prefill)} prefill + {len(samples.decode)} decode samples{pooled_text}"
    )
    if write and config is not None:
        _write(config, new, comment, console)
    else:
        console.print("\npaste into the config (or rerun with --config FILE --write):")
        console.print(snippet(new, comment), markup=False, highlight=False)


def _with_remote_fixed(model: CostModel, samples: ProfileSamples) -> CostModel:
    """`remote_fixed_s` from the measured serving stages: a remote prefill's three hops
    (to the prefill replica, back, to decode) and the KV transfer's fixed cost, less the one
    hop a local prefill takes. Unchanged when the run has no serving samples."""
    from pdserve.sim.fit import fit_sim_profile

    if not samples.serving:
        return model
    try:
        prof = fit_sim_profile(
            model, samples.serving, source="", local_prefill=samples.local_prefill
        )
    except ValueError:
        return model
    local_hop_s = prof.local_hop_s if prof.local_hop_s is not None else prof.hop_s
    remote_fixed_s = max(0.0, 3 * prof.hop_s + prof.kv_transfer_fixed_s - local_hop_s)
    return model.model_copy(update={"remote_fixed_s": round(remote_fixed_s, 6)})


def _write_sim_profile(
    path: pathlib.Path,
    model: CostModel,
    samples: ProfileSamples,
    url: str,
    console: Console,
) -> None:
    """The simulator profile of the idle cluster: its engines and serving layer (no
    `cpu_host` block; a CPU machine's is fitted on a loaded run, `simulate --fit-host-on`)."""
    from pdserve.sim.fit import fit_sim_profile

    source = f"pdserve profile of {url} on {datetime.date.today().isoformat()}"
    if samples.source != "this run":
        source += f", pooled: {samples.source}"
    try:
        prof = fit_sim_profile(
            model, samples.serving, source=source, local_prefill=samples.local_prefill
        )
        path.write_text(prof.model_dump_json(indent=2) + "\n")
    except ValueError as exc:
        console.print(f"[red]cannot fit the simulator profile:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    except OSError as exc:
        console.print(f"[red]cannot write {path}:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    console.print(
        f"simulator profile written to {path} (hop {prof.hop_s * 1e3:.1f} ms, router "
        f"{prof.router_s * 1e3:.1f} ms, KV transfer {prof.kv_transfer_fixed_s * 1e3:.1f} ms + "
        f"{prof.cost_model.kv_transfer_per_token_s * 1e6:.2f} us/token)"
    )
    if prof.local_prefill_fixed_s is not None:
        console.print(_local_prefill_line(prof, samples.local_prefill))
    if prof.local_hop_s is not None:
        console.print(
            f"a local prefill's hop: {prof.local_hop_s * 1e3:.1f} ms each way (the "
            f"remote-prefill path's: {prof.hop_s * 1e3:.1f} ms)"
        )


def _local_prefill_line(prof: SimProfile, local: Sequence[LocalPrefillSample]) -> str:
    """How a prompt's fixed cost on its decode engine compares with the prefill pool's."""
    from pdserve.sim.fit import local_prefill_fixed_s

    alone = [s for s in local if s.batch_size == 0]
    beside = len(local) - len(alone)
    alone_s = local_prefill_fixed_s(prof.cost_model, alone)
    alone_text = f"; alone on the engine {alone_s * 1e3:.1f} ms" if beside and alone_s else ""
    used = f"{beside} joining a decode batch" if beside else f"{len(alone)} alone"
    return (
        f"a prompt's fixed cost: {(prof.local_prefill_fixed_s or 0) * 1e3:.1f} ms prefilled on "
        f"its decode engine ({used}{alone_text}), "
        f"{prof.cost_model.fixed_overhead_s * 1e3:.1f} ms on the prefill pool"
    )


def _read_pool(paths: Sequence[pathlib.Path], console: Console) -> list[ProfileSamples]:
    """The earlier reports to pool with (read before measuring: a bad path costs nothing)."""
    try:
        return [read_report(path) for path in paths]
    except ValueError as exc:
        console.print(f"[red]error:[/red] --pool {escape(str(exc))}")
        raise typer.Exit(2) from exc


def _show_pool(console: Console, runs: Sequence[ProfileSamples], model: CostModel) -> None:
    """Each pooled run's step at its largest decode batch and how far its decode samples are
    from the pooled fit: a run that caught the host at an odd moment stands out. `runs[0]` is
    this run: a warning when it is far off the pool (`report.pool_drift_warning`)."""
    parts = []
    for run in runs:
        largest = run.largest_batch_step_s()
        step = f"B={largest[0]} step {largest[1] * 1e3:.2f} ms" if largest else "no decode"
        error = report.mean_abs_error_decode(run.decode, model)
        off = f", {error * 100:.0f}% off the fit" if error is not None else ""
        parts.append(f"{run.source}: {step}{off}")
    console.print(f"fitted on {len(runs)} runs' samples pooled ({'; '.join(parts)})")
    warning = report.pool_drift_warning(runs[0].decode, model)
    if warning:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")


def _load_config(path: pathlib.Path | None, write: bool, console: Console) -> PdserveConfig | None:
    if path is None:
        if write:
            console.print("[red]error:[/red] --write needs --config FILE")
            raise typer.Exit(2)
        return None
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        console.print(f"[red]config error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    if write and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        console.print(f"[red]error:[/red] cannot write {path} (or its folder)")
        raise typer.Exit(2)
    return cfg


def _measure(
    console: Console, plan: ProfilePlan, make: Callable[[Progress], Profiler]
) -> tuple[Measurements, str]:
    """Run the profiler under a progress bar; (measurements, model id)."""
    columns = (
        TextColumn("{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with ProgressBar(*columns, console=console, transient=False) as bar:
        task = bar.add_task("connecting", total=plan.num_requests())
        profiler = make(lambda what: bar.update(task, advance=1, description=what))
        try:
            return asyncio.run(profiler.run()), profiler.model or ""
        except ProfileError as exc:
            bar.stop()
            console.print(f"[red]profile failed:[/red] {escape(str(exc))}")
            raise typer.Exit(1) from exc


def _show(
    console: Console,
    m: Measurements,
    old: CostModel,
    new: CostModel,
    notes: tuple[str, ...],
    fitted_on: ProfileSamples,
) -> None:
    """This run's samples against both models, then both models' errors over the samples
    `new` was fitted on (this run's, or the pool's) and a warning when it misses them."""
    decode = [b.sample() for b in m.batches]
    skipped = (
        f"{m.skipped_local_prefills} request(s) prefilled on the decode engine: not sampled"
        if m.skipped_local_prefills
        else ""
    )
    console.print(
        render.samples_table(
            "prefill (engine compute time)", report.prefill_rows(m.prefill, old, new), skipped
        )
    )
    console.print(
        render.samples_table(
            "decode step (client TPOT, median over the batch; ctx = batch total)",
            report.decode_rows(decode, old, new),
        )
    )
    console.print(render.coefficients_table(old, new))
    errors = {  # label: (the config's model, the fitted one), mean |relative error|
        "prefill": (
            report.mean_abs_error_prefill(fitted_on.prefill, old),
            report.mean_abs_error_prefill(fitted_on.prefill, new),
        ),
        "decode": (
            report.mean_abs_error_decode(fitted_on.decode, old),
            report.mean_abs_error_decode(fitted_on.decode, new),
        ),
    }
    for label, (old_error, new_error) in errors.items():
        if line := render.error_line(label, old_error, new_error):
            console.print(line)
    for label, (_, new_error) in errors.items():
        if warning := report.noisy_fit_warning(label, new_error):
            console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    for note in notes:
        console.print(f"[yellow]fit note:[/yellow] {escape(note)}")


def _write(path: pathlib.Path, model: CostModel, comment: str, console: Console) -> None:
    try:
        result = update_config_text(path.read_text(), model, comment=comment, origin=str(path))
        write_atomic(path, result.text)
    except (ConfigError, OSError) as exc:
        console.print(f"[red]cannot update {path}:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    kept = "" if result.comments_kept else " (re-dumped from the data: comments were lost)"
    console.print(f"[green]updated router.routing.cost_model in {path}[/green]{kept}")
