"""`python -m pdserve.bench.peers`: pdserve against Ray Serve LLM's P/D app and the floor.

Starts each setup in turn (Ray Serve LLM, two plain vLLM servers + proxy, pdserve), runs the
same `pdserve bench` mixed load against it while sampling its processes' CPU, stops it, and
repeats in alternating rounds. Prints one table (throughput, TTFT, E2E, serving-layer and
engine CPU per request, ratios) and writes everything to JSON. See README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

from pdserve.bench.peers.identity import compare
from pdserve.bench.peers.pdserve_setup import PdserveSetup
from pdserve.bench.peers.phase import LoadSpec, PhaseRunner, machine_busy_ticks
from pdserve.bench.peers.plain import PlainVLLMSetup
from pdserve.bench.peers.ray_llm import RayServeLLMSetup
from pdserve.bench.peers.report import (
    SETUP_LABELS,
    PhaseResult,
    SetupSummary,
    ratios,
    summarize_setup,
    table_lines,
)
from pdserve.bench.peers.sampler import list_pids, read_record
from pdserve.bench.peers.setups import DEFAULT_SETUPS, SETUP_NAMES, Ports, Setup
from pdserve.config import load_config
from pdserve.model_source import resolve_model

DEFAULT_CONFIG = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "local.yaml"


def _log(message: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {message}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pdserve.bench.peers", description=__doc__)
    p.add_argument("--rounds", type=int, default=2, help="alternations a, b, c, a, b, c, ...")
    p.add_argument("--num-requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--token-ids", action="store_true", help="token-id prompts (no calibration)")
    p.add_argument(
        "--setups",
        default=",".join(DEFAULT_SETUPS),
        help=f"comma-separated, from {','.join(SETUP_NAMES)}",
    )
    p.add_argument("--config", type=pathlib.Path, default=DEFAULT_CONFIG, help="pdserve YAML")
    p.add_argument("--json", type=pathlib.Path, default=None, help="write the results here")
    p.add_argument("--log-dir", type=pathlib.Path, default=None, help="logs, raw JSON, CPU rows")
    p.add_argument(
        "--stock-peers",
        action="store_true",
        help="peers without pdserve's CPU placement env (NIXL thread, core pins)",
    )
    p.add_argument("--sample-interval-s", type=float, default=0.2)
    p.add_argument("--idle-window-s", type=float, default=5.0)
    p.add_argument(
        "--profile-s",
        type=float,
        default=0.0,
        help="py-spy the busiest serving processes for N s (extra load, round 0)",
    )
    p.add_argument("--retries", type=int, default=1, help="retries of a failed phase")
    p.add_argument(
        "--wait-for-idle-s",
        type=float,
        default=900.0,
        help="wait up to N s for other load on the machine to end first",
    )
    args = p.parse_args(argv)
    unknown = set(args.setups.split(",")) - set(SETUP_NAMES)
    if unknown:
        p.error(f"unknown setups {sorted(unknown)}; choose from {', '.join(SETUP_NAMES)}")
    return args


def foreign_activity(window_s: float = 3.0) -> tuple[int, float]:
    """(vLLM engine processes running now, cores the machine is busy) — before we start."""
    engines = 0
    for pid in list_pids():
        rec = read_record(pid, {})
        if rec is not None and rec.comm.startswith("VLLM::"):
            engines += 1
    busy0 = machine_busy_ticks()
    time.sleep(window_s)
    busy = (machine_busy_ticks() - busy0) / os.sysconf("SC_CLK_TCK") / window_s
    return engines, busy


def wait_for_quiet(limit_s: float, notes: list[str]) -> None:
    """Wait (up to `limit_s`) until no other vLLM engine runs and the machine is near idle."""
    deadline = time.monotonic() + limit_s
    while True:
        engines, busy = foreign_activity()
        quiet = engines == 0 or busy < 0.3
        if quiet or time.monotonic() > deadline:
            note = f"before start: {engines} other vLLM engine processes, busy {busy:.2f} cores"
            notes.append(note + ("" if quiet else " (waited, ran anyway)"))
            _log(notes[-1])
            return
        _log(f"machine busy ({engines} vLLM engine processes, {busy:.2f} cores); waiting")
        time.sleep(30)


def build_setups(args: argparse.Namespace, log_dir: pathlib.Path) -> list[Setup]:
    cfg = load_config(args.config)
    model_path = resolve_model(cfg.model)
    ports = Ports()
    every: dict[str, Setup] = {
        "ray_serve_llm": RayServeLLMSetup(cfg, model_path, ports, log_dir, _log, args.stock_peers),
        "plain_vllm": PlainVLLMSetup(cfg, model_path, ports, log_dir, _log, args.stock_peers),
        "pdserve": PdserveSetup(args.config, cfg.model.served_model_name, ports, log_dir, _log),
        "pdserve_proxy": PdserveSetup(
            args.config, cfg.model.served_model_name, ports, log_dir, _log,
            name="pdserve_proxy", env={"PDSERVE_DIRECT_INGRESS": "0"},
        ),
    }  # fmt: skip
    chosen = args.setups.split(",")
    return [every[name] for name in SETUP_NAMES if name in chosen]


def summaries_of(phases: list[PhaseResult]) -> dict[str, SetupSummary]:
    """Each setup's phases pooled, in the fixed setup order."""
    names = [n for n in SETUP_NAMES if any(p.setup == n for p in phases)]
    return {n: summarize_setup(n, [p for p in phases if p.setup == n]) for n in names}


def results_json(
    args: argparse.Namespace,
    phases: list[PhaseResult],
    runner: PhaseRunner,
    notes: list[str],
) -> dict[str, Any]:
    """The whole run as one JSON document (`schema_version` 1)."""
    summaries = summaries_of(phases)
    names = list(summaries)
    identity = compare(runner.identity) if len(runner.identity) > 1 else None
    return {
        "schema_version": 1,
        "command": " ".join(["python -m pdserve.bench.peers", *sys.argv[1:]]),
        "load": dataclasses.asdict(runner.load),
        "rounds": args.rounds,
        "stock_peers": args.stock_peers,
        "setup_labels": {n: SETUP_LABELS[n] for n in names},
        "setups": {n: dataclasses.asdict(s) for n, s in summaries.items()},
        "ratios": ratios(summaries),
        "phases": [p.to_json() for p in phases],
        "identity": dataclasses.asdict(identity) if identity else None,
        "profiles": runner.profiles,
        "notes": notes,
    }


def print_report(summaries: dict[str, SetupSummary], doc: dict[str, Any]) -> None:
    """The table, per-round throughput, the identity verdict and notes, on stdout."""
    print()
    for line in table_lines(summaries, doc["ratios"]):
        print(line)
    for name, s in summaries.items():
        rounds = ", ".join(
            f"{v:.2f}" if v is not None else "failed" for v in s.requests_per_s_by_round
        )
        idle = s.idle_serving_cpu_ms_per_s
        idle_text = "-" if idle is None else f"{idle:.0f}"
        print(f"  {name}: req/s by round [{rounds}]; idle serving CPU {idle_text} ms/s")
    if doc["identity"] is not None:
        ident = doc["identity"]
        verdict = "token-identical" if ident["identical"] else "DIFFERENT"
        print(f"greedy outputs across setups: {verdict} {ident['per_prompt']}")
    for note in doc["notes"]:
        print(f"note: {note}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log_dir = args.log_dir or pathlib.Path(tempfile.mkdtemp(prefix="pdserve-peers-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    _log(f"logs and raw results: {log_dir}")
    notes: list[str] = []
    setups = build_setups(args, log_dir)
    load = LoadSpec(
        num_requests=args.num_requests, concurrency=args.concurrency, token_ids=args.token_ids
    )
    cfg = load_config(args.config)
    runner = PhaseRunner(
        load,
        cfg.model.served_model_name,
        log_dir,
        _log,
        args.sample_interval_s,
        args.idle_window_s,
        args.profile_s,
        args.retries,
    )
    if args.wait_for_idle_s > 0:
        wait_for_quiet(args.wait_for_idle_s, notes)
    phases: list[PhaseResult] = []
    try:
        for round_index in range(args.rounds):
            for setup in setups:
                phases.append(runner.run(setup, round_index))
    except KeyboardInterrupt:
        notes.append("interrupted (Ctrl-C): results cover the phases that finished")
    doc = results_json(args, phases, runner, notes)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2))
        _log(f"wrote {args.json}")
    print_report(summaries_of(phases), doc)
    return 0 if phases and all(p.error is None for p in phases) else 1
