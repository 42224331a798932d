"""An engine start that would hang for good is ended by the pool's start deadline, and a pool
that never starts in time makes `pdserve up` fail saying so.

The hang is real and is the one a CI run met: a replica's NIXL side-channel port is taken
between `pick_free_port` and the engine's bind, vLLM's handshake-listener thread dies on
"Address already in use", and the engine core waits for it forever. The probe starts one real
prefill engine (vLLM CPU, NixlConnector) with that port held by another socket.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from pdserve import cluster_procs
from tests.integration.cluster import PDSERVE, ROOT, run_up, stop_cluster

ROUTER_PORT = 14450
RAY_PORT = 6394
RAY_METRICS_PORT = 8088

START_TIMEOUT_S = 45.0
"""The probe's deadline: the engine reaches its side-channel bind ~20 s into its start here."""


def test_a_start_that_hangs_on_a_taken_port_is_killed_at_the_deadline() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.engine_start_probe",
         str(ROOT / "deploy" / "local.yaml"), str(START_TIMEOUT_S)],
        cwd=ROOT, capture_output=True, text=True, timeout=START_TIMEOUT_S + 120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # The engine hit the taken port: its listener thread died, so without the deadline the
    # start would never end.
    assert "Address already in use" in proc.stderr, proc.stderr[-3000:]
    assert result["outcome"] == "timeout", result
    assert "engine_start_timeout_seconds" in result["error"]
    # It ended at the deadline (vLLM notices its engine core's exit within its 10 s poll).
    assert START_TIMEOUT_S <= result["after_s"] < START_TIMEOUT_S + 30, result
    assert result["engine_processes_left"] == [], result


def test_a_pool_that_never_starts_in_time_fails_up_and_names_the_deadline(tmp_path: Path) -> None:
    """Decode's deadline (5 s) is shorter than any engine start: each replica is failed by its
    own deadline, Ray Serve retries it up to its limit, and `pdserve up` fails with the
    engine's reason and stops what it started."""
    raw = yaml.safe_load((ROOT / "deploy" / "local.yaml").read_text())
    raw["router"]["port"] = ROUTER_PORT
    raw["decode"]["engine_start_timeout_seconds"] = 5
    cfg_path = tmp_path / "never-starts.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    env = {
        **os.environ,
        "PDSERVE_STATE_DIR": str(tmp_path / "state"),
        "PDSERVE_RAY_PORT": str(RAY_PORT),
        "PDSERVE_RAY_METRICS_PORT": str(RAY_METRICS_PORT),
    }
    env.pop("PDSERVE_API_KEY", None)
    shm_before = cluster_procs.shm_snapshot()
    up = run_up(PDSERVE, cfg_path, env)
    try:
        said = " ".join((up.stdout + up.stderr).split())  # the console wraps long lines
        assert up.returncode == 1, said[-3000:]
        assert "DecodeServer: DEPLOY_FAILED" in said, said[-3000:]
        reason = "the decode engine was not ready within its start deadline (5 s"
        assert "start-up failed: deploying pdserve failed" in said, said[-3000:]
        # Serve retried the replica, each failed start named its cause, and so does the error.
        assert "Retrying" in said and said.count(reason) >= 2, said[-3000:]
        assert said.rfind(reason) > said.rfind("start-up failed"), said[-3000:]
        assert "PrefillServer: HEALTHY 1/1" in said  # the other pool was unaffected
    finally:
        stop_cluster(env, shm_before, ports=(ROUTER_PORT,))
