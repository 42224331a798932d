"""A two-node cluster: the GPU example's pool layout (2 prefill + 1 decode, each pool pinned by
its Ray resource) on CPU, its prefill pool on the head in one network namespace and its decode
pool on a joined node in another, the two linked only by a veth pair. Started with the real
commands (`pdserve up --head --pool prefill`, `pdserve join HEAD --pool decode`) and stopped
with `pdserve down` on each node, which must leave nothing behind."""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from pdserve import cluster_procs
from tests.integration.conftest import PDSERVE, UP_TIMEOUT_S
from tests.integration.two_node.layout import gpu_example_on_cpu
from tests.integration.two_node.netns import Host, Link, NamespaceUnavailable, two_hosts

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


def _node_env(tmp: pathlib.Path, name: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PDSERVE_STATE_DIR": str(tmp / name),
        "PDSERVE_RAY_PORT": str(RAY_PORT),
        "PDSERVE_RAY_METRICS_PORT": str(METRICS_PORT),
    }
    env.pop("PDSERVE_API_KEY", None)
    return env


def _start(nodes: TwoNodes, log: pathlib.Path) -> None:
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


def _down(nodes: TwoNodes) -> list[str]:
    """`pdserve down` on the head (the app, everywhere), then on the worker; what is left."""
    outputs = []
    for host in (nodes.head, nodes.worker):
        with contextlib.suppress(Exception):
            outputs.append(nodes.run(host, [PDSERVE, "down"], timeout_s=180))
    return outputs


@pytest.fixture(scope="package")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    tmp = tmp_path_factory.mktemp("two_node")
    shm_before = cluster_procs.shm_snapshot()
    raw: dict[str, Any] = gpu_example_on_cpu(ROUTER_PORT, {"prefill": [0], "decode": [1]})
    config_path = tmp / "two-node.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    try:
        hosts = two_hosts()
        link = hosts.__enter__()
    except NamespaceUnavailable as exc:
        reason = f"this machine cannot create network namespaces, so no two-host test: {exc}"
        if os.environ.get("CI"):  # CI runs as root: there the test must run, not skip
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        envs = {h.netns: _node_env(tmp, h.netns) for h in (link.a, link.b)}
        nodes = TwoNodes(link, config_path, envs)
        try:
            _start(nodes, tmp / "up.log")
        except BaseException:
            _down(nodes)
            raise
        try:
            yield nodes
        finally:
            outputs = _down(nodes)
            left = cluster_procs.leftovers(cluster_procs.Scope(RAY_PORT), shm_before)
            assert not left, f"`pdserve down` on both nodes left behind: {left}\n{outputs}"
    finally:
        hosts.__exit__(None, None, None)
