"""Setup (b), the floor: two plain vLLM OpenAI servers behind `proxy.py`.

The prefill server is a NixlConnector `kv_producer`, the decode server a `kv_consumer`, each
with its own NIXL side-channel port. All three are children of the harness, in its session
(engines started with one `setsid` each collapsed on this machine; see DESIGN.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import IO, Any

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


def api_server_args(engine_kwargs: dict[str, Any]) -> list[str]:
    """vLLM engine keyword arguments as `vllm.entrypoints.openai.api_server` flags."""
    out: list[str] = []
    for key, value in engine_kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False:
            out.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, dict | list):
            out += [flag, json.dumps(value)]
        elif value is not None:
            out += [flag, str(value)]
    return out


class PlainVLLMSetup(PeerSetup):
    """Two `python -m vllm.entrypoints.openai.api_server` + the minimal P/D proxy."""

    name = "plain_vllm"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    def _http_port(self) -> int:
        return self._ports.plain_http

    def scope(self) -> Scope:
        return Scope(root_pids=frozenset(p.pid for p in self._procs))

    def _spawn(self, cmd: list[str], env: dict[str, str], log_name: str) -> None:
        out = (self._log_dir / log_name).open("ab")
        self._logs.append(out)
        self._procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env))

    def _server(self, role: PoolName, http_port: int, side_channel_port: int) -> None:
        kwargs = peer_engine_kwargs(self._config, role, self._model_path)
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        cmd += api_server_args(kwargs)
        cmd += ["--host", "127.0.0.1", "--port", str(http_port), "--disable-uvicorn-access-log"]
        env = {**os.environ, **peer_engine_env(self._config, role, side_channel_port, self._stock)}
        self._spawn(cmd, env, f"plain-{role}.log")

    def _alive(self) -> bool:
        return all(p.poll() is None for p in self._procs)

    def start(self) -> None:
        p = self._ports
        require_free([p.plain_http, p.plain_prefill_http, p.plain_decode_http], self.name)
        self._log("starting two plain vLLM servers (30-60 s) and the proxy")
        self._server("prefill", p.plain_prefill_http, p.side_channel[2])
        self._server("decode", p.plain_decode_http, p.side_channel[3])
        model = self._config.model.served_model_name
        try:
            for port in (p.plain_prefill_http, p.plain_decode_http):
                wait_ready(f"http://127.0.0.1:{port}", model, alive=self._alive)
        except SetupError as exc:
            raise SetupError(f"{exc}; logs: {self._log_dir}/plain-*.log") from exc
        self._spawn(
            [
                sys.executable,
                "-m",
                "pdserve.bench.peers.proxy",
                "--port",
                str(p.plain_http),
                "--prefill",
                f"http://127.0.0.1:{p.plain_prefill_http}",
                "--decode",
                f"http://127.0.0.1:{p.plain_decode_http}",
            ],
            dict(os.environ),
            "plain-proxy.log",
        )
        wait_ready(self.url, model, alive=self._alive)

    def stop(self) -> None:
        kill_scope(self.scope(), self._log)
        for proc in self._procs:
            proc.poll()
        for out in self._logs:
            out.close()
        self._procs, self._logs = [], []
