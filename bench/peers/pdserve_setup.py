"""Setup (c): pdserve itself, `pdserve up --detach` with a private copy of the config.

The copy changes only ports (router 8303, NIXL side channels from 23650); Ray's GCS, state
directory and metrics port come from PDSERVE_RAY_PORT / PDSERVE_STATE_DIR /
PDSERVE_RAY_METRICS_PORT. Tear-down kills the cluster's processes by pid (the harness's own
rule for every setup, `procs.Scope`). `pdserve_proxy` is the same with PDSERVE_DIRECT_INGRESS=0:
the Serve settings the Helm chart runs (HTTP through Serve's proxy on the router port).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import yaml

from pdserve.bench.peers.procs import Scope
from pdserve.bench.peers.setups import (
    START_TIMEOUT_S,
    Log,
    Ports,
    SetupError,
    kill_scope,
    require_free,
    wait_ready,
)


def private_config(raw: dict[str, Any], ports: Ports) -> dict[str, Any]:
    """A copy of a pdserve config (parsed YAML) on the harness's ports."""
    out = {**raw}
    out["router"] = {**raw.get("router", {}), "port": ports.pdserve_http, "host": "127.0.0.1"}
    kv = {**raw.get("kv_transfer", {})}
    kv["side_channel_base_port"] = ports.pdserve_side_channel_base
    out["kv_transfer"] = kv
    return out


class PdserveSetup:
    """`pdserve up --detach` on private ports."""

    def __init__(
        self,
        config_path: pathlib.Path,
        model_id: str,
        ports: Ports,
        log_dir: pathlib.Path,
        log: Log,
        name: str = "pdserve",
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self._env = env or {}
        self._config_path = config_path
        self._model_id = model_id
        self._ports = ports
        self._log_dir = log_dir
        self._log = log
        self._state_dir = log_dir / "pdserve-state"
        self.url = f"http://127.0.0.1:{ports.pdserve_http}"

    def scope(self) -> Scope:
        return Scope(ray_gcs_port=self._ports.pdserve_gcs)

    def start(self) -> None:
        p = self._ports
        require_free([p.pdserve_gcs, p.pdserve_http], self.name)
        raw = yaml.safe_load(self._config_path.read_text()) or {}
        cfg_path = self._log_dir / "pdserve-peers.yaml"
        cfg_path.write_text(yaml.safe_dump(private_config(raw, p), sort_keys=False))
        env = {
            **os.environ,
            "PDSERVE_RAY_PORT": str(p.pdserve_gcs),
            "PDSERVE_STATE_DIR": str(self._state_dir),
            "PDSERVE_RAY_METRICS_PORT": str(p.pdserve_metrics),
            **self._env,
        }
        pdserve = str(pathlib.Path(sys.executable).with_name("pdserve"))
        log_path = self._log_dir / "pdserve-up.log"
        self._log("starting pdserve (engines take 30-60 s)")
        with log_path.open("ab") as out:
            try:
                proc = subprocess.run(
                    [pdserve, "up", "--detach", "--config", str(cfg_path)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    timeout=START_TIMEOUT_S + 60,
                )
            except subprocess.TimeoutExpired as exc:
                raise SetupError(f"pdserve up timed out; see {log_path}") from exc
        if proc.returncode != 0:
            tail = log_path.read_text(errors="replace")[-1500:]
            raise SetupError(f"pdserve up failed; {log_path}:\n{tail}")
        wait_ready(self.url, self._model_id)

    def stop(self) -> None:
        kill_scope(self.scope(), self._log)
        shutil.rmtree(self._state_dir, ignore_errors=True)
