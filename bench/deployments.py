"""Adapter for `pdserve bench --deployments A=a.yaml,B=b.yaml`: the same workload against
whole deployments the bench starts itself, one at a time, on this machine.

Called by bench/main.py instead of a plain run. For each round and each deployment in order:
`pdserve up --detach` with a private copy of its config (bench/peers/pdserve_setup.py: its own
router port, Ray port and state folder, so nothing the user runs is touched), wait until it
answers, run one phase of the workload with the ordinary `Runner`, stop every process of that
cluster, next. Phases carry the deployment's name where a `--compare` run has a policy name,
so the report, tables and ratios are the usual ones with one column per deployment.
"""

from __future__ import annotations

import dataclasses
import pathlib
import tempfile
from collections.abc import Callable

from rich.progress import Progress

from pdserve.bench.client import BenchClient, BenchError, Clock
from pdserve.bench.config import BenchConfig
from pdserve.bench.peers.pdserve_setup import PdserveSetup
from pdserve.bench.peers.setups import Ports, SetupError
from pdserve.bench.runner import Runner, RunOutcome
from pdserve.config import ConfigError, load_config


async def run_deployments(
    cfg: BenchConfig, progress: Progress, log: Callable[[str], None], clock: Clock
) -> RunOutcome:
    """Every (round, deployment) phase; stops at the first phase that was interrupted.
    Raises BenchError when a deployment's config is invalid or its cluster does not start
    (the clusters started so far are stopped)."""
    configs = cfg.deployment_configs
    models = {}
    for name, path in configs.items():
        try:
            models[name] = load_config(path).model.served_model_name
        except ConfigError as exc:
            raise BenchError(f"deployment {name}: {exc}") from exc
    log_dir = pathlib.Path(tempfile.mkdtemp(prefix="pdserve-bench-deployments-"))
    log(f"cluster logs: {log_dir}")
    out = RunOutcome()
    for round_index in range(cfg.rounds):
        for name, path in configs.items():
            phase_dir = log_dir / f"{name}-{round_index}"
            phase_dir.mkdir()
            setup = PdserveSetup(path, models[name], Ports(), phase_dir, log, name=name)
            log(f"round {round_index + 1}/{cfg.rounds}: starting {name} ({path})")
            try:
                setup.start()
                one = cfg.model_copy(
                    update={
                        "url": setup.url,
                        "deployments": (),
                        "rounds": 1,
                        "json_path": None,
                        "report_dir": None,
                    }
                )
                client = BenchClient(setup.url, cfg.concurrency, cfg.request_timeout_s, clock=clock)
                try:
                    got = await Runner(one, client, progress, log, clock).run()
                finally:
                    await client.close()
            except SetupError as exc:
                raise BenchError(f"deployment {name} did not start: {exc}") from exc
            finally:
                setup.stop()
            if out.model is None:
                out.model, out.calibration = got.model, got.calibration
                out.notes += got.notes
            out.phases += [
                dataclasses.replace(p, policy=name, round_index=round_index) for p in got.phases
            ]
            if got.interrupted:
                out.interrupted = True
                return out
    return out
