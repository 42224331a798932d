"""An engine start that would hang for good is ended by the pool's start deadline.

The hang is real and is the one a CI run met: a replica's NIXL side-channel port is taken
between `pick_free_port` and the engine's bind, vLLM's handshake-listener thread dies on
"Address already in use", and the engine core waits for it forever. The probe starts one real
prefill engine (vLLM CPU, NixlConnector) with that port held by another socket.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.integration.conftest import ROOT

START_TIMEOUT_S = 60.0
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
