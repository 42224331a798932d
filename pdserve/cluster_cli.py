"""`pdserve up`, `pdserve join`, `pdserve down`: run pdserve on this machine, alone or as one node
of a multi-node Ray cluster. Registered in pdserve/cli.py."""

from __future__ import annotations

import pathlib
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from pdserve.config import ConfigError, PdserveConfig, load_config
from pdserve.names import POOLS, PoolName
from pdserve.node import NodeSpec, parse_cores

if TYPE_CHECKING:
    from pdserve.local_cluster import DeploymentProgress, StartedNode

DEFAULT_CONFIG = pathlib.Path(__file__).resolve().parent.parent / "deploy" / "local.yaml"
DEFAULT_RAY_PORT = 6390

ConfigOpt = Annotated[
    pathlib.Path | None,
    typer.Option("--config", "-c", help="pdserve YAML config (default: deploy/local.yaml)."),
]
PoolsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--pool",
        help="A pool whose replicas may run on this node: prefill or decode (repeat for both).",
    ),
]
CoresOpt = Annotated[
    str | None,
    typer.Option(help="CPU cores this node's processes run on, e.g. 0-7 or 0,2 (default all)."),
]
NodeIpOpt = Annotated[
    str | None,
    typer.Option(
        "--node-ip",
        help="The address other nodes reach this one on (default: the one Ray detects).",
    ),
]


def load(path: pathlib.Path | None, console: Console) -> PdserveConfig:
    """The config at `path` (default: the packaged deploy/local.yaml); exit 2 when invalid."""
    if path is None:
        from importlib.resources import files

        packaged = pathlib.Path(str(files("pdserve.deploy") / "local.yaml"))
        path = packaged if packaged.exists() else DEFAULT_CONFIG
    try:
        return load_config(path)
    except ConfigError as exc:
        console.print(f"[red]config error:[/red] {exc}")
        raise typer.Exit(2) from exc


def _node_spec(
    kind: str, pools: list[str] | None, cores: str | None, node_ip: str | None
) -> NodeSpec:
    """The node the options describe; typer.BadParameter when they make no sense."""
    chosen = pools or list(POOLS)
    unknown = [p for p in chosen if p not in POOLS]
    if unknown:
        raise typer.BadParameter(
            f"unknown pool {unknown[0]!r}: use prefill or decode", param_hint="--pool"
        )
    try:
        parsed = parse_cores(cores) if cores is not None else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--cores") from exc
    pool_names: tuple[PoolName, ...] = tuple(p for p in POOLS if p in chosen)
    return NodeSpec.model_validate(
        {"kind": kind, "pools": pool_names, "cores": parsed, "address": node_ip}
    )


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
                    f"{r.num_running}/{r.num_target} {r.message[:400]}".rstrip()
                )


def _print_join_help(console: Console, node: StartedNode, metrics_port: int) -> None:
    missing = [p for p in POOLS if p not in node.spec.pools]
    carried = ", ".join(node.spec.pools) or "no pool"
    console.print(f"Ray head: {node.gcs_address}  (this node carries: {carried})")
    console.print("  add a node (run on it, with pdserve installed and the same model reachable):")
    for pool in missing or POOLS:
        console.print(f"    pdserve join {node.gcs_address} --pool {pool}")
    console.print(f"  this node's engine metrics: http://{node.address}:{metrics_port}/metrics")


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
    head: Annotated[
        bool,
        typer.Option(
            "--head",
            help="Be the head of a multi-node cluster: listen on this node's address and wait "
            "for `pdserve join` nodes to carry the pools this one does not.",
        ),
    ] = False,
    pools: PoolsOpt = None,
    cores: CoresOpt = None,
    node_ip: NodeIpOpt = None,
) -> None:
    """Start Ray and deploy the prefill/decode cluster; print the URL when ready. Alone (the
    default) everything runs on this machine on loopback; with --head other machines join it."""
    from pdserve import local_cluster as lc
    from pdserve.model_source import resolve_model

    console = Console()
    if not head and (pools or node_ip):
        raise typer.BadParameter("--pool and --node-ip are for multi-node clusters: add --head")
    spec = _node_spec("head" if head else "single", pools, cores, node_ip)
    cfg = load(config, console)
    shm_before = lc.shm_snapshot()
    try:
        with console.status("starting Ray"):
            node = lc.start_node(cfg, spec)
    except lc.ClusterError as exc:
        console.print(f"[red]start-up failed:[/red] {exc}")
        raise typer.Exit(1) from exc
    lc.write_state(node, shm_before, cfg)
    if head:
        _print_join_help(console, node, lc.RAY_METRICS_PORT)
    # Before the model (possibly a long download): can the cluster place every pool?
    missing = lc.unplaceable(cfg, node.gcs_address)
    label = "[yellow]waiting for a node:[/yellow]" if head else "[red]cannot place:[/red]"
    for line in missing:
        console.print(f"{label} {line}")
    if missing and not head:  # nothing will join a single-machine cluster
        console.print(
            "[red]start-up failed:[/red] this machine cannot place every pool "
            "(to add machines, start with `pdserve up --head`: docs/multi-node.md)"
        )
        lc.down(console.print)
        raise typer.Exit(1)
    try:
        with console.status(f"preparing model '{cfg.model.source}'"):
            path = resolve_model(cfg.model)
    except Exception as exc:
        console.print(f"[red]start-up failed:[/red] model '{cfg.model.source}': {exc}")
        lc.down(console.print)
        raise typer.Exit(1) from exc
    console.print(f"model: {path}")
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

    gcs = node.gcs_address
    try:
        if console.is_terminal:
            with Live(render([]), console=console, refresh_per_second=2, transient=False) as live:
                lc.deploy(cfg, gcs, lambda r: live.update(render(r)), timeout_s)
        else:  # a log, not a screen: one line per change, so a stuck start shows where
            lc.deploy(cfg, gcs, _ProgressLines(console.print, t0), timeout_s)
        with console.status("waiting for the router to see every pool (GET /ready)"):
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
    _wait_for_signal(console)
    lc.down(console.print)


def _wait_for_signal(console: Console) -> None:
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


def join(
    address: Annotated[
        str, typer.Argument(help=f"The head's HOST[:PORT] (port {DEFAULT_RAY_PORT} if left out).")
    ],
    pools: PoolsOpt = None,
    cores: CoresOpt = None,
    node_ip: NodeIpOpt = None,
    config: Annotated[
        pathlib.Path | None,
        typer.Option(
            "--config",
            "-c",
            help="The cluster's pdserve config, for the Ray resources its pools ask for "
            "(default: deploy/local.yaml).",
        ),
    ] = None,
) -> None:
    """Add this machine to a running pdserve cluster as a Ray worker node carrying the given
    pools; Ray Serve places those pools' replicas here. Stop it with `pdserve down`."""
    from pdserve import local_cluster as lc

    console = Console()
    if not pools:
        raise typer.BadParameter("name the pools this node carries", param_hint="--pool")
    spec = _node_spec("worker", pools, cores, node_ip)
    head_address = address if ":" in address else f"{address}:{DEFAULT_RAY_PORT}"
    cfg = load(config, console)
    shm_before = lc.shm_snapshot()
    try:
        with console.status(f"joining {head_address}"):
            node = lc.start_node(cfg, spec, head_address)
    except lc.ClusterError as exc:
        console.print(f"[red]join failed:[/red] {exc}")
        raise typer.Exit(1) from exc
    lc.write_state(node, shm_before, cfg)
    resources = ", ".join(f"{k}={v:g}" for k, v in sorted(node.resources.items()))
    console.print(
        f"[green]joined[/green] {head_address} as node {node.address} carrying "
        f"{', '.join(spec.pools)} ({spec.num_cpus()} CPUs; Ray resources {resources})"
    )
    console.print(
        f"  this node's engine metrics: http://{node.address}:{lc.RAY_METRICS_PORT}/metrics"
    )
    console.print("  leave the cluster with `pdserve down` on this machine")


def down() -> None:
    """Stop what `pdserve up` or `pdserve join` started on this machine (on the head: the Serve
    app and its engines on every node; then this node's Ray processes and /dev/shm buffers)."""
    from pdserve import local_cluster as lc

    console = Console()
    lc.down(console.print)
    console.print("pdserve stopped")
