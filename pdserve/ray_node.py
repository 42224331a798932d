"""Start this machine's Ray node for pdserve: the head (`pdserve up`) or a worker that joins a
head (`pdserve join`). Ray's own cluster join does the work; this module only chooses the
`ray start` flags and the environment every process of the node inherits.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
from collections.abc import Mapping

from pdserve.node import LOOPBACK, NODE_ADDRESS_ENV, NodeSpec

# Ray's object store is only used for small control messages here; keep it small.
OBJECT_STORE_BYTES = 512 << 20


class NodeStartError(RuntimeError):
    """`ray start` failed; the message carries Ray's own explanation."""


def ray_bin() -> str:
    return str(pathlib.Path(sys.executable).with_name("ray"))


def worker_ports(ray_port: int) -> tuple[int, int]:
    """The port range (inclusive) for the Ray workers of the cluster on `ray_port`: 1,000
    ports in 20000-29999, apart for clusters whose Ray ports differ in the last digit, and
    clear of pdserve's listeners (8000s, 15600-18600) and of the OS's ephemeral ports."""
    low = 20000 + (ray_port % 10) * 1000
    return low, low + 999


def detect_address(spec: NodeSpec, head_address: str | None) -> str:
    """The address this node is reached on: the one given, loopback for a single-machine
    cluster, else the one Ray picks (the interface that routes toward the head, or toward the
    internet on a head)."""
    if spec.address is not None:
        return spec.address
    if spec.kind == "single":
        return LOOPBACK
    import ray.util

    return str(ray.util.get_node_ip_address(head_address))


def ray_start_args(
    spec: NodeSpec,
    address: str,
    resources: Mapping[str, float],
    ray_port: int,
    metrics_port: int,
    head_address: str | None = None,
) -> list[str]:
    """The `ray start` arguments (after `ray start`) for this node. `head_address` is the
    head's HOST:PORT for a worker, None for a head or a single node."""
    if (spec.kind == "worker") != (head_address is not None):
        raise ValueError("a worker node needs the head's address; a head or single node none")
    args = ["--head", f"--port={ray_port}"] if head_address is None else [
        f"--address={head_address}"
    ]  # fmt: skip
    if spec.kind != "single":
        # Ray turns 127.0.0.1 into the machine's address itself, so a single node lets Ray
        # pick; pdserve's own listeners stay on loopback there (see node_environment).
        args.append(f"--node-ip-address={address}")
    low, high = worker_ports(ray_port)
    args += [
        f"--num-cpus={spec.num_cpus()}",
        f"--resources={json.dumps(dict(resources), sort_keys=True)}",
        f"--object-store-memory={OBJECT_STORE_BYTES}",
        # The log monitor tails every worker's log to forward it to drivers; pdserve's driver
        # takes no worker logs (they stay in the session's log files), so it only cost CPU.
        "--include-log-monitor=false",
        f"--metrics-export-port={metrics_port}",
        # Ray's default worker ports (10002-19999) overlap pdserve's own listeners (router
        # proxy, NIXL side channels, KV events): a worker holding one made a later cluster's
        # Serve proxy fail to bind. Workers get a range of their own, per Ray port.
        f"--min-worker-port={low}",
        f"--max-worker-port={high}",
        "--disable-usage-stats",
    ]
    if head_address is None:
        args.append("--include-dashboard=false")
    return args


def node_environment(address: str, serve_env: Mapping[str, str]) -> dict[str, str]:
    """What `ray start` passes down to every process of the node (replicas, engines)."""
    return {
        # Ray starts workers at nice 15 and engines inherit it; the engines and the HTTP path
        # are the work itself, so run them at normal priority.
        "RAY_worker_niceness": "0",
        # The address NIXL side channels and KV-event publishers bind and advertise.
        NODE_ADDRESS_ENV: address,
        **serve_env,
    }


def start_node(
    spec: NodeSpec,
    address: str,
    resources: Mapping[str, float],
    ray_port: int,
    metrics_port: int,
    serve_env: Mapping[str, str],
    head_address: str | None = None,
) -> None:
    """Run `ray start` for this node (it returns once the node's daemons run); pinned to
    `spec.cores` when given (every process of the node inherits the affinity)."""
    cmd = [ray_bin(), "start", *ray_start_args(
        spec, address, resources, ray_port, metrics_port, head_address
    )]  # fmt: skip
    env = {**os.environ, **node_environment(address, serve_env)}
    cores = spec.cores

    def pin() -> None:
        if cores is not None:
            os.sched_setaffinity(0, cores)

    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, preexec_fn=pin)
    if proc.returncode != 0:
        raise NodeStartError(f"`ray start` failed:\n{proc.stderr.strip() or proc.stdout.strip()}")


GCS_CONNECT_TIMEOUT_S = 2.0
"""How long `reachable` waits for the GCS port to accept a TCP connection."""
RAY_STATUS_TIMEOUT_S = 60.0
"""How long `ray status` may take against a port that accepted (a live GCS answers in ~1 s)."""


def port_open(gcs_address: str, timeout_s: float = GCS_CONNECT_TIMEOUT_S) -> bool:
    """Whether something accepts TCP connections at HOST:PORT (refused or silent: False)."""
    host, _, port = gcs_address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def reachable(gcs_address: str) -> bool:
    """True when a Ray cluster answers at HOST:PORT. The port is tried first: `ray status`
    against an address where nothing listens retries for about 40 s before it gives up, and
    `pdserve up` and `down` ask this of every fresh machine."""
    if not port_open(gcs_address):
        return False
    try:
        proc = subprocess.run(
            [ray_bin(), "status", f"--address={gcs_address}"],
            capture_output=True,
            check=False,
            timeout=RAY_STATUS_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0
