"""Finding the local test cluster's vLLM engine processes by the markers pdserve gives them."""

from __future__ import annotations

import time

import psutil

from tests.integration.conftest import RAY_PORT


def engine_processes(role: str, timeout_s: float = 60.0) -> list[psutil.Process]:
    """The vLLM engine processes (EngineCore and workers) of this cluster's `role` engine.
    Fails naming every vLLM process it saw, with its markers, when there is none after
    `timeout_s` (a replica that is being replaced has none for a while)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found, seen = [], []
        for proc in psutil.process_iter(["name", "environ"], ad_value=None):
            name = proc.info["name"] or ""
            if not name.startswith("VLLM::"):
                continue
            env = proc.info["environ"]
            if env is None:
                seen.append(f"{proc.pid} {name}: environ unreadable")
                continue
            role_env, gcs = env.get("PDSERVE_ENGINE_ROLE"), env.get("PDSERVE_GCS_ADDRESS", "")
            seen.append(f"{proc.pid} {name}: role={role_env} gcs={gcs}")
            if role_env == role and gcs.endswith(f":{RAY_PORT}"):
                found.append(proc)
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(
                f"no {role} engine process of the cluster on Ray port {RAY_PORT} after "
                f"{timeout_s:.0f} s; vLLM processes here: {seen or 'none'}"
            )
        time.sleep(1)
