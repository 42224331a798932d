"""Setup (a): Ray Serve LLM's P/D app on a harness-private Ray head.

`start()`: make sure the peer venv exists, `ray start --head --num-cpus=2` on private ports
(GCS 6393) with the peer venv's interpreter (so Ray's workers can import `ray.serve.llm`),
then deploy the app with `ray_llm_app.py` and wait until it answers. `stop()` kills the
cluster's processes by pid (`ray stop` would stop every Ray cluster on the machine).
"""

from __future__ import annotations

import json
import os
import subprocess

from pdserve.bench.peers.peer_env import ensure_peer_env
from pdserve.bench.peers.procs import Scope
from pdserve.bench.peers.setups import (
    PeerSetup,
    SetupError,
    kill_scope,
    peer_engine_env,
    peer_engine_kwargs,
    require_free,
    wait_ready,
)
from pdserve.names import PoolName

RAY_TEMP_DIR = "/tmp/ray-pdpeers"
OBJECT_STORE_BYTES = 512 << 20


class RayServeLLMSetup(PeerSetup):
    """Ray Serve LLM (`build_pd_openai_app`), 1 prefill + 1 decode replica."""

    name = "ray_serve_llm"

    def _http_port(self) -> int:
        return self._ports.ray_serve_llm_http

    def scope(self) -> Scope:
        return Scope(ray_gcs_port=self._ports.ray_serve_llm_gcs)

    def start(self) -> None:
        p = self._ports
        require_free([p.ray_serve_llm_gcs, p.ray_serve_llm_http], self.name)
        python = ensure_peer_env(self._log)
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        if not self._stock:
            env["RAY_worker_niceness"] = "0"  # as pdserve starts its Ray: engines at nice 0
        self._run(
            [
                str(python),
                "-m",
                "ray.scripts.scripts",
                "start",
                "--head",
                f"--port={p.ray_serve_llm_gcs}",
                "--node-ip-address=127.0.0.1",
                "--num-cpus=2",
                f"--object-store-memory={OBJECT_STORE_BYTES}",
                "--include-dashboard=false",
                f"--ray-client-server-port={p.ray_serve_llm_client}",
                f"--dashboard-agent-listen-port={p.ray_serve_llm_agent}",
                f"--metrics-export-port={p.ray_serve_llm_metrics}",
                f"--min-worker-port={p.ray_serve_llm_min_worker}",
                f"--max-worker-port={p.ray_serve_llm_max_worker}",
                f"--temp-dir={RAY_TEMP_DIR}",
                "--disable-usage-stats",
            ],
            env,
            "ray-start.log",
            timeout_s=120,
        )
        spec = {
            "gcs_port": p.ray_serve_llm_gcs,
            "http_port": p.ray_serve_llm_http,
            "model_id": self._config.model.served_model_name,
            "model_path": self._model_path,
        }
        roles: tuple[tuple[PoolName, int], ...] = (
            ("prefill", p.side_channel[0]),
            ("decode", p.side_channel[1]),
        )
        for role, port in roles:
            spec[role] = {
                "engine_kwargs": peer_engine_kwargs(self._config, role, self._model_path),
                "env": peer_engine_env(self._config, role, port, self._stock),
            }
        self._log("deploying Ray Serve LLM's P/D app (engines take 30-60 s)")
        self._run(
            [str(python), "-m", "pdserve.bench.peers.ray_llm_app", json.dumps(spec)],
            env,
            "ray-serve-llm-deploy.log",
            timeout_s=660,
        )
        wait_ready(self.url, self._config.model.served_model_name)

    def _run(self, cmd: list[str], env: dict[str, str], log_name: str, timeout_s: float) -> None:
        path = self._log_dir / log_name
        what = " ".join(cmd[2:4])
        with path.open("ab") as out:
            try:
                proc = subprocess.run(
                    cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout_s
                )
            except subprocess.TimeoutExpired as exc:
                raise SetupError(f"{self.name}: {what} timed out; see {path}") from exc
        if proc.returncode != 0:
            tail = path.read_text(errors="replace")[-1500:]
            raise SetupError(f"{self.name}: {what} failed; {path}:\n{tail}")

    def stop(self) -> None:
        kill_scope(self.scope(), self._log)
