"""The two-node cluster's parts (plain code, no fixtures): its ports, `TwoNodes` (the two
namespaced hosts and each node's `pdserve` environment), and starting and stopping it with the
real commands. The `two_nodes` fixture (conftest.py) uses them."""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import time
from dataclasses import dataclass

from tests.integration.cluster import PDSERVE, UP_TIMEOUT_S
from tests.integration.two_node.netns import Host, Link

RAY_PORT = 6397
ROUTER_PORT = 14300
METRICS_PORT = 8085  # per namespace: each has its own ports
JOIN_WITHIN_S = 120


@dataclass(frozen=True)
class TwoNodes:
    link: Link
    config_path: pathlib.Path
    envs: dict[str, dict[str, str]]
    """Environment of `pdserve` on each node, by namespace name."""

    @property
    def head(self) -> Host:
        return self.link.a

    @property
    def worker(self) -> Host:
        return self.link.b

    @property
    def gcs_address(self) -> str:
        return f"{self.head.address}:{RAY_PORT}"

    @property
    def url(self) -> str:
        """The router, as seen from inside the head's namespace."""
        return f"http://127.0.0.1:{ROUTER_PORT}"

    def run(self, host: Host, argv: list[str], timeout_s: float = 120, stdin: str = "") -> str:
        """Run `argv` inside `host`'s namespace with that node's env; its stdout (raises on
        a failure, with its output)."""
        proc = subprocess.run(
            host.cmd(argv), env=self.envs[host.netns], input=stdin,
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"{argv} in {host.netns}: rc {proc.returncode}\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")  # fmt: skip
        return proc.stdout


def node_env(tmp: pathlib.Path, name: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PDSERVE_STATE_DIR": str(tmp / name),
        "PDSERVE_RAY_PORT": str(RAY_PORT),
        "PDSERVE_RAY_METRICS_PORT": str(METRICS_PORT),
    }
    env.pop("PDSERVE_API_KEY", None)
    return env


def start_nodes(nodes: TwoNodes, log: pathlib.Path) -> None:
    """`up --head` on the head (it waits for the decode pool), `join` on the worker as soon
    as the head answers, then wait for `up` to report the cluster ready."""
    head, worker = nodes.head, nodes.worker
    config = str(nodes.config_path)
    up_cmd = [PDSERVE, "up", "--head", "--pool", "prefill", "--node-ip", head.address,
              "--config", config, "--detach", "--timeout-s", str(UP_TIMEOUT_S)]  # fmt: skip
    with log.open("w") as out:
        up = subprocess.Popen(head.cmd(up_cmd), env=nodes.envs[head.netns], stdout=out,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
        join_cmd = [PDSERVE, "join", nodes.gcs_address, "--pool", "decode",
                    "--node-ip", worker.address, "--config", config]  # fmt: skip
        deadline = time.monotonic() + JOIN_WITHIN_S
        while True:
            try:
                nodes.run(worker, join_cmd)
                break
            except RuntimeError:
                if up.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(3)
        rc = up.wait(timeout=UP_TIMEOUT_S + 60)
    if rc != 0:
        raise RuntimeError(f"`pdserve up --head` failed (rc {rc}):\n{log.read_text()[-4000:]}")


def down_nodes(nodes: TwoNodes) -> list[str]:
    """`pdserve down` on the head (the app, everywhere), then on the worker; what is left."""
    outputs = []
    for host in (nodes.head, nodes.worker):
        with contextlib.suppress(Exception):
            outputs.append(nodes.run(host, [PDSERVE, "down"], timeout_s=180))
    return outputs
