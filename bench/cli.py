"""`pdserve bench` command line (typer): parse options into a `BenchConfig`, then delegate.

Registered in pdserve/cli.py. Options default to None here so that `BenchConfig` owns every
default; the help text of each option comes from the config field's description.
"""

from __future__ import annotations

import pathlib
from typing import Annotated, Any

import typer
from pydantic import BaseModel

_ANSI_RESET = "\x1b[0m"


def _literal(text: str) -> str:
    """Help text that `--help` shows as written. Typer renders option help as rich markup,
    where `:100:` in `uniform:100:2000` is an emoji code (shown as 💯) and `[...]` a style tag;
    help holding an ANSI escape is read as ANSI text instead, which has neither. The trailing
    reset changes no style; without rich, click prints it (invisible) or strips it (no tty)."""
    return text + _ANSI_RESET


def _option(config: type[BaseModel], field: str, flag: str | None, extra: str = "") -> Any:
    """A typer option whose help is the config field's description and default, shown
    literally (`_literal`)."""
    info = config.model_fields[field]
    shown = ",".join(map(str, info.default)) if isinstance(info.default, tuple) else info.default
    hidden = info.default is None or info.default is False or info.default == ()
    default = "" if hidden else f" (default: {shown})"
    name = flag or "--" + field.replace("_", "-")
    help_text = _literal(f"{info.description}{extra}{default}")
    return typer.Option(name, help=help_text, show_default=False)


def _invalid_options(console: Any, errors: Any) -> None:
    """Print each option validation error as `invalid option WHERE: MESSAGE`."""
    for err in errors:
        where = ".".join(str(p) for p in err["loc"]) or "options"
        console.print(f"[red]invalid option {where}:[/red] {err['msg']}")


def _opt(field: str, flag: str | None = None, extra: str = "") -> Any:
    from pdserve.bench.config import BenchConfig

    return _option(BenchConfig, field, flag, extra)


def bench(
    url: Annotated[str | None, _opt("url")] = None,
    workload: Annotated[str | None, _opt("workload", extra=" mixed|agent|synthetic|trace.")] = None,
    model: Annotated[str | None, _opt("model")] = None,
    seed: Annotated[int | None, _opt("seed")] = None,
    num_requests: Annotated[int | None, _opt("num_requests")] = None,
    concurrency: Annotated[int | None, _opt("concurrency")] = None,
    request_rate: Annotated[float | None, _opt("request_rate")] = None,
    output_tokens: Annotated[int | None, _opt("output_tokens")] = None,
    short_tokens: Annotated[int | None, _opt("short_tokens")] = None,
    long_tokens: Annotated[int | None, _opt("long_tokens")] = None,
    long_fraction: Annotated[float | None, _opt("long_fraction")] = None,
    burst_size: Annotated[int | None, _opt("burst_size")] = None,
    agents: Annotated[int | None, _opt("agents")] = None,
    steps: Annotated[int | None, _opt("steps")] = None,
    initial_tokens: Annotated[int | None, _opt("initial_tokens")] = None,
    tool_result_tokens: Annotated[int | None, _opt("tool_result_tokens")] = None,
    tool_role: Annotated[str | None, _opt("tool_role", extra=" tool|user.")] = None,
    cache_breaker: Annotated[
        str | None, _opt("cache_breaker", "--agent-cache-breaker", " none|timestamp.")
    ] = None,
    input_dist: Annotated[str | None, _opt("input_dist")] = None,
    output_dist: Annotated[str | None, _opt("output_dist")] = None,
    trace: Annotated[pathlib.Path | None, _opt("trace")] = None,
    trace_time_scale: Annotated[float | None, _opt("trace_time_scale")] = None,
    trace_block_tokens: Annotated[int | None, _opt("trace_block_tokens")] = None,
    trace_length_scale: Annotated[float | None, _opt("trace_length_scale")] = None,
    max_requests: Annotated[int | None, _opt("max_requests")] = None,
    max_input_tokens: Annotated[int | None, _opt("max_input_tokens")] = None,
    max_output_tokens: Annotated[int | None, _opt("max_output_tokens")] = None,
    clip_mode: Annotated[str | None, _opt("clip_mode", extra=" clip|skip.")] = None,
    token_ids: Annotated[bool, _opt("token_ids")] = False,
    warmup: Annotated[int | None, _opt("warmup")] = None,
    request_timeout_s: Annotated[float | None, _opt("request_timeout_s")] = None,
    slo_ttft_s: Annotated[float | None, _opt("slo_ttft_s")] = None,
    slo_tpot_s: Annotated[float | None, _opt("slo_tpot_s")] = None,
    compare: Annotated[
        str | None,
        _opt(
            "policies",
            "--compare",
            " Comma-separated, e.g. round_robin,pdserve, kv-verify:on,kv-verify:off or"
            " round_robin,itl-guard:off,itl-guard:on or round_robin,pace:off,pace:on.",
        ),
    ] = None,
    deployments: Annotated[
        str | None,
        _opt("deployments", extra=" Comma-separated, e.g. aggregated=a.yaml,1p1d=b.yaml."),
    ] = None,
    rounds: Annotated[int | None, _opt("rounds")] = None,
    json_path: Annotated[pathlib.Path | None, _opt("json_path", "--json")] = None,
    report_dir: Annotated[pathlib.Path | None, _opt("report_dir", "--report")] = None,
) -> None:
    """Benchmark an OpenAI-compatible endpoint (streaming TTFT/ITL/TPOT/E2E, goodput),
    optionally comparing routing policies (--compare A,B) or whole deployments the bench
    starts itself one at a time (--deployments A=a.yaml,B=b.yaml) side by side."""
    options: dict[str, Any] = {k: v for k, v in locals().items() if v is not None}
    from pydantic import ValidationError
    from rich.console import Console

    from pdserve.bench.config import BenchConfig
    from pdserve.bench.main import run_bench

    options.pop("compare", None)
    options["token_ids"] = token_ids
    if compare is not None:
        options["policies"] = tuple(p.strip() for p in compare.split(","))
    if deployments is not None:
        options["deployments"] = tuple(d.strip() for d in deployments.split(",") if d.strip())
    console = Console()
    try:
        cfg = BenchConfig(**options)
    except ValidationError as exc:
        _invalid_options(console, exc.errors())
        raise typer.Exit(2) from exc
    raise typer.Exit(run_bench(cfg, console))


def _oopt(field: str, flag: str | None = None) -> Any:
    from pdserve.bench.overload_config import OverloadConfig

    return _option(OverloadConfig, field, flag)


def bench_overload(
    url: Annotated[str | None, _oopt("url")] = None,
    model: Annotated[str | None, _oopt("model")] = None,
    seed: Annotated[int | None, _oopt("seed")] = None,
    levels: Annotated[str | None, _oopt("concurrency_levels", "--levels")] = None,
    num_requests: Annotated[int | None, _oopt("num_requests")] = None,
    output_tokens: Annotated[int | None, _oopt("output_tokens")] = None,
    short_tokens: Annotated[int | None, _oopt("short_tokens")] = None,
    long_tokens: Annotated[int | None, _oopt("long_tokens")] = None,
    long_fraction: Annotated[float | None, _oopt("long_fraction")] = None,
    burst_size: Annotated[int | None, _oopt("burst_size")] = None,
    warmup: Annotated[int | None, _oopt("warmup")] = None,
    request_timeout_s: Annotated[float | None, _oopt("request_timeout_s")] = None,
    max_attempts: Annotated[int | None, _oopt("max_attempts")] = None,
    max_retry_wait_s: Annotated[float | None, _oopt("max_retry_wait_s")] = None,
    max_reject_s: Annotated[float | None, _oopt("max_reject_s")] = None,
    max_ttft_p99_ratio: Annotated[float | None, _oopt("max_ttft_p99_ratio")] = None,
    health_probes_per_s: Annotated[float | None, _oopt("health_probes_per_s")] = None,
    max_reject_health_ratio: Annotated[float | None, _oopt("max_reject_health_ratio")] = None,
    json_path: Annotated[pathlib.Path | None, _oopt("json_path", "--json")] = None,
    report_dir: Annotated[pathlib.Path | None, _oopt("report_dir", "--report")] = None,
) -> None:
    """Overload test: closed loops of far more clients than the server sustains (e.g. 32 then
    320); checks that every attempt is 200 or 429, 429s are fast with Retry-After, and admitted
    TTFT p99 stays within a multiple of its value at the first level. Exit 1 if a check fails."""
    options: dict[str, Any] = {k: v for k, v in locals().items() if v is not None}
    from pydantic import ValidationError
    from rich.console import Console

    from pdserve.bench.overload_config import OverloadConfig
    from pdserve.bench.overload_run import run_overload

    console = Console()
    try:
        if "levels" in options:
            raw = options.pop("levels").split(",")
            options["concurrency_levels"] = tuple(int(x) for x in raw if x.strip())
        cfg = OverloadConfig(**options)
    except ValueError as exc:  # ValidationError is a ValueError; so is a bad --levels int
        errors = (
            exc.errors()
            if isinstance(exc, ValidationError)
            else [{"loc": ("levels",), "msg": str(exc)}]
        )
        _invalid_options(console, errors)
        raise typer.Exit(2) from exc
    raise typer.Exit(run_overload(cfg, console))


def _fopt(field: str, flag: str | None = None) -> Any:
    from pdserve.bench.faults_config import FaultsConfig

    return _option(FaultsConfig, field, flag)


def bench_faults(
    url: Annotated[str | None, _fopt("url")] = None,
    model: Annotated[str | None, _fopt("model")] = None,
    ray_port: Annotated[int | None, _fopt("ray_port")] = None,
    faults: Annotated[str | None, _fopt("faults")] = None,
    clients: Annotated[int | None, _fopt("clients")] = None,
    rate_per_s: Annotated[float | None, _fopt("rate_per_s", "--rate")] = None,
    prompt_words: Annotated[int | None, _fopt("prompt_words")] = None,
    output_tokens: Annotated[int | None, _fopt("output_tokens")] = None,
    stream_tokens: Annotated[int | None, _fopt("stream_tokens")] = None,
    policy: Annotated[str | None, _fopt("policy")] = None,
    warmup_s: Annotated[float | None, _fopt("warmup_s")] = None,
    tail_s: Annotated[float | None, _fopt("tail_s")] = None,
    recover_timeout_s: Annotated[float | None, _fopt("recover_timeout_s")] = None,
    request_timeout_s: Annotated[float | None, _fopt("request_timeout_s")] = None,
    json_path: Annotated[pathlib.Path | None, _fopt("json_path", "--json")] = None,
    report_dir: Annotated[pathlib.Path | None, _fopt("report_dir", "--report")] = None,
) -> None:
    """Fault test of a local cluster: under a steady stream load, kill or freeze a real
    prefill engine, kill the decode engine mid-stream, and abandon requests between prefill
    and decode; print the reliability table (sent, succeeded, fell back, failed cleanly, lost,
    time to recover). Exit 1 if a request was lost or the cluster did not recover."""
    options: dict[str, Any] = {k: v for k, v in locals().items() if v is not None}
    from pydantic import ValidationError
    from rich.console import Console

    from pdserve.bench.faults_config import FaultsConfig
    from pdserve.bench.faults_run import run_bench_faults

    console = Console()
    try:
        if "faults" in options:
            options["faults"] = tuple(f.strip() for f in options["faults"].split(",") if f.strip())
        cfg = FaultsConfig(**options)
    except ValidationError as exc:
        _invalid_options(console, exc.errors())
        raise typer.Exit(2) from exc
    raise typer.Exit(run_bench_faults(cfg, console))


def _topt(field: str, flag: str | None = None) -> Any:
    from pdserve.bench.tenants_config import TenantsBenchConfig

    return _option(TenantsBenchConfig, field, flag)


def bench_tenants(
    url: Annotated[str | None, _topt("url")] = None,
    model: Annotated[str | None, _topt("model")] = None,
    key_file: Annotated[pathlib.Path | None, _topt("key_file")] = None,
    flood_tenant: Annotated[str | None, _topt("flood_tenant")] = None,
    steady_tenant: Annotated[str | None, _topt("steady_tenant")] = None,
    heavy_tenant: Annotated[str | None, _topt("heavy_tenant")] = None,
    light_tenant: Annotated[str | None, _topt("light_tenant")] = None,
    steady_rate_per_s: Annotated[float | None, _topt("steady_rate_per_s", "--steady-rate")] = None,
    steady_tokens: Annotated[int | None, _topt("steady_tokens")] = None,
    flood_tokens: Annotated[int | None, _topt("flood_tokens")] = None,
    flood_share_multiple: Annotated[float | None, _topt("flood_share_multiple")] = None,
    flood_max_attempts: Annotated[int | None, _topt("flood_max_attempts")] = None,
    calibrate_clients: Annotated[int | None, _topt("calibrate_clients")] = None,
    calibrate_s: Annotated[float | None, _topt("calibrate_s")] = None,
    output_tokens: Annotated[int | None, _topt("output_tokens")] = None,
    phase_s: Annotated[float | None, _topt("phase_s")] = None,
    weights_s: Annotated[float | None, _topt("weights_s")] = None,
    weights_clients: Annotated[int | None, _topt("weights_clients")] = None,
    weights_output_tokens: Annotated[int | None, _topt("weights_output_tokens")] = None,
    max_retry_wait_s: Annotated[float | None, _topt("max_retry_wait_s")] = None,
    request_timeout_s: Annotated[float | None, _topt("request_timeout_s")] = None,
    json_path: Annotated[pathlib.Path | None, _topt("json_path", "--json")] = None,
) -> None:
    """Tenants sharing one cluster, in one run (start it with deploy/local-tenants.yaml):
    tenant B's TTFT alone, beside tenant A's flood with fair sharing on, and with it off; A's
    429s and their x-ratelimit-* headers; then two tenants of weights 3 and 1 saturating the
    prefill tier, split by engine-reported prefill seconds. Official openai client. Exit 1 if
    a check fails."""
    options: dict[str, Any] = {k: v for k, v in locals().items() if v is not None}
    from pydantic import ValidationError
    from rich.console import Console

    from pdserve.bench.tenants_config import TenantsBenchConfig
    from pdserve.bench.tenants_run import run_tenants

    console = Console()
    try:
        cfg = TenantsBenchConfig(**options)
    except ValidationError as exc:
        _invalid_options(console, exc.errors())
        raise typer.Exit(2) from exc
    raise typer.Exit(run_tenants(cfg, console))


def bench_router(
    replicas: Annotated[
        str, typer.Option(help="Replicas per pool, comma-separated (each pool gets that many).")
    ] = "8,64,256",
    entries: Annotated[
        str, typer.Option(help="(replica, block) entries in the index, comma-separated.")
    ] = "1000000,10000000",
    decisions: Annotated[int, typer.Option(min=10, help="Timed decisions per fleet.")] = 2000,
    json_path: Annotated[pathlib.Path | None, typer.Option("--json", help="Write rows.")] = None,
) -> None:
    """The routing decision's CPU time, the prefix index's memory and its ingest rate at fleet
    size: the real pipeline and index on synthetic replicas (no engines, no Ray)."""
    import dataclasses
    import json

    from rich.console import Console

    from pdserve.bench.router_bench import measure, render

    console = Console()
    rows = []
    for n_entries in (int(float(e)) for e in entries.split(",")):
        for n in (int(r) for r in replicas.split(",")):
            console.print(f"measuring {n}+{n} replicas, {n_entries:,} entries …")
            rows.append(measure(n, n_entries, decisions))
    console.print(render(rows))
    if json_path is not None:
        json_path.write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=2) + "\n")
