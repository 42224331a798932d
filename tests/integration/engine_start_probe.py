"""Start one real prefill engine outside Ray with its NIXL side-channel port already taken,
and report, as one JSON line on stdout, how its start ended. Run as a script by
test_engine_start_deadline.py (a process of its own: the engine's environment variables must
not leak into the test process).

usage: python -m tests.integration.engine_start_probe CONFIG START_TIMEOUT_S
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import socket
import sys
import time

import psutil

from pdserve.config import load_config
from pdserve.engine.server import EngineServer
from pdserve.engine.start_deadline import EngineStartTimeoutError
from pdserve.model_source import resolve_model


async def _start(server: EngineServer) -> dict[str, object]:
    began_s = time.monotonic()
    try:
        await server.start()
    except EngineStartTimeoutError as exc:
        return {"outcome": "timeout", "error": str(exc), "after_s": time.monotonic() - began_s}
    except Exception as exc:  # any other end of the start is a finding too
        return {"outcome": type(exc).__name__, "error": str(exc)}
    server.shutdown()
    return {"outcome": "started", "after_s": time.monotonic() - began_s}


def _live(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The processes that still run (a killed child nobody reaped yet is a zombie: not)."""
    live = []
    for proc in procs:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                live.append(proc)
        except psutil.NoSuchProcess:
            pass
    return live


def main(config_path: str, start_timeout_s: float) -> None:
    loaded = load_config(pathlib.Path(config_path))
    prefill = loaded.prefill.model_copy(update={"engine_start_timeout_seconds": start_timeout_s})
    config = loaded.model_copy(update={"prefill": prefill})
    server = EngineServer(config, "prefill", resolve_model(config.model), "start-probe")
    # What a racing process does between pick_free_port and the engine's bind: take the port.
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.bind(("127.0.0.1", server.side_channel_port))
    squatter.listen()
    result = asyncio.run(_start(server))
    result["engine_processes_left"] = [p.pid for p in _live(psutil.Process().children(True))]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
