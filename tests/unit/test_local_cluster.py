"""`pdserve down` stops only its own cluster's processes, including ones that hide their
origin, and removes only /dev/shm leftovers nobody uses."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

from pdserve import cluster_procs, local_cluster, ray_node
from pdserve.cluster_procs import Scope

PORT = 6390


@pytest.mark.parametrize(
    ("cmdline", "own"),
    [
        (["/venv/bin/gcs_server", f"--gcs_server_port={PORT}", "--node-ip-address=x"], True),
        (["raylet", f"--gcs-address=127.0.0.1:{PORT}", "--node_manager_port=0"], True),
        (["python", "-m", "ray.util.client.server", f"--address=127.0.0.1:{PORT}"], True),
        (["gcs_server", f"--gcs_server_port={PORT + 1}"], False),  # another cluster
        (["raylet", f"--gcs-address=127.0.0.1:{PORT}1"], False),  # port 63901, not 6390
        (["python", "app.py", f"--port={PORT}"], False),
        (["ray::IDLE"], False),  # renamed worker: found as a descendant, not by name
        ([], False),
    ],
)
def test_is_own_ray_process(cmdline: list[str], own: bool) -> None:
    assert cluster_procs.is_own_ray_process(cmdline, Scope(PORT)) is own


@pytest.mark.parametrize(
    ("environ", "own"),
    [
        ({"PDSERVE_ENGINE_ROLE": "prefill", "PDSERVE_GCS_ADDRESS": f"127.0.0.1:{PORT}"}, True),
        ({"PDSERVE_ENGINE_ROLE": "decode", "PDSERVE_GCS_ADDRESS": f"10.0.0.2:{PORT}"}, True),
        ({"PDSERVE_ENGINE_ROLE": "decode", "PDSERVE_GCS_ADDRESS": f"127.0.0.1:{PORT + 1}"}, False),
        ({"PDSERVE_ENGINE_ROLE": "decode"}, False),  # cluster unknown: not ours to stop
        ({"PDSERVE_GCS_ADDRESS": f"127.0.0.1:{PORT}"}, False),  # a replica, not an engine
        ({}, False),
    ],
)
def test_is_own_engine(environ: dict[str, str], own: bool) -> None:
    assert cluster_procs.is_own_engine(environ, Scope(PORT)) is own


def test_stale_shm_keeps_what_was_there_what_is_used_and_what_is_not_vllm_or_ray() -> None:
    entries = ["/dev/shm/psm_new", "/dev/shm/psm_old", "/dev/shm/vllm_busy", "/dev/shm/sem.mp-1",
               "/dev/shm/ray_plasma", "/dev/shm/postgres.42"]  # fmt: skip
    keep, in_use = {"/dev/shm/psm_old"}, {"/dev/shm/vllm_busy"}
    assert cluster_procs.stale_shm(entries, keep, in_use) == [
        "/dev/shm/psm_new", "/dev/shm/ray_plasma", "/dev/shm/sem.mp-1"]  # fmt: skip


# ---- the selection against real processes (psutil reads them) ------------------------------

FREE_PORT = 59_731  # a port no real cluster here uses: the test's processes only name it
SPAWN_AGENT = "import subprocess; subprocess.run(['bash', '-c', 'exec -a ray::SomeAgent sleep 30'])"


@contextlib.contextmanager
def _started(*cmd: str, env: dict[str, str] | None = None) -> Iterator[psutil.Process]:
    proc = subprocess.Popen(list(cmd), env={**os.environ, **(env or {})})
    root = psutil.Process(proc.pid)
    try:
        yield root
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in root.children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
        proc.kill()
        proc.wait()


def _wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_own_ray_processes_include_descendants_that_renamed_themselves() -> None:
    # A process naming the GCS port with a grandchild that renamed itself (`exec -a`), like
    # raylet -> agent; and a process of another cluster, which must be left alone.
    with (
        _started(sys.executable, "-c", SPAWN_AGENT, f"--gcs_server_port={FREE_PORT}") as own,
        _started(sys.executable, "-c", SPAWN_AGENT, f"--gcs_server_port={FREE_PORT + 1}") as other,
    ):
        _wait_for(lambda: any(c.name() == "sleep" for c in own.children(recursive=True)))
        found = {p.pid for p in cluster_procs.own_ray_processes(Scope(FREE_PORT))}
        agents = [p for p in own.children(recursive=True) if p.cmdline()[:1] == ["ray::SomeAgent"]]
        assert own.pid in found and agents and {a.pid for a in agents} <= found
        assert other.pid not in found and os.getpid() not in found
        assert not found & {c.pid for c in other.children(recursive=True)}


def test_own_engines_are_found_by_their_environment() -> None:
    role = {"PDSERVE_ENGINE_ROLE": "decode"}
    with (
        _started(
            "sleep", "30", env={**role, "PDSERVE_GCS_ADDRESS": f"127.0.0.1:{FREE_PORT}"}
        ) as own,
        _started("sleep", "30", env={**role, "PDSERVE_GCS_ADDRESS": f"127.0.0.1:{FREE_PORT + 1}"}),
    ):
        assert [p.pid for p in cluster_procs.own_engines(Scope(FREE_PORT))] == [own.pid]


def _marked(pid: int, ppid: int, *cmdline: str) -> cluster_procs.MarkedProcess:
    return cluster_procs.MarkedProcess(pid, ppid, cmdline or ("python", "-c", "spawn_main()"))


def test_engine_trees_follow_the_process_tree_not_the_names() -> None:
    # Replica 10 (unmarked: it set the markers after it started) with its resource tracker
    # 11, engine 12 with worker 13; replica 19's engine 20 with workers 21 and 22; replica
    # 29's engine 30 before its worker started.
    tracker = _marked(11, 10, "python", "-c", "from multiprocessing.resource_tracker import main")
    marked = [tracker, _marked(13, 12), _marked(12, 10), _marked(20, 19), _marked(22, 20),
              _marked(21, 20), _marked(30, 29)]  # fmt: skip
    assert cluster_procs.engine_trees(marked) == [
        cluster_procs.EngineTree(12, (13,)),
        cluster_procs.EngineTree(20, (21, 22)),
        cluster_procs.EngineTree(30, ()),
    ]


def test_pool_engines_finds_an_engine_and_its_workers_by_their_markers() -> None:
    # A shell stands for the EngineCore, its two sleeps for workers: no vLLM names anywhere.
    env = {"PDSERVE_ENGINE_ROLE": "prefill", "PDSERVE_GCS_ADDRESS": f"127.0.0.1:{FREE_PORT}"}
    with _started("sh", "-c", "sleep 30 & sleep 30 & wait", env=env) as core:
        scope = Scope(FREE_PORT)
        deadline = time.monotonic() + 10
        while (
            len(engines := cluster_procs.pool_engines(scope, "prefill")) != 1
            or len(engines[0][1]) != 2
        ):
            assert time.monotonic() < deadline, engines
            time.sleep(0.05)
        assert engines[0][0].pid == core.pid
        assert {w.pid for w in engines[0][1]} == {c.pid for c in core.children()}
        assert cluster_procs.pool_engines(scope, "decode") == []


def test_ray_worker_ports_stay_clear_of_pdserve_listeners_and_of_each_other() -> None:
    ranges = {port: ray_node.worker_ports(port) for port in (6390, 6391, 6393, 6394, 6396)}
    for low, high in ranges.values():
        assert 20000 <= low < high <= 29999 and high - low == 999  # below 32768 (ephemeral)
    spans = sorted(ranges.values())
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), spans


HEAD, WORKER = "10.77.0.1", "10.77.0.2"


@pytest.mark.parametrize(
    ("cmdline", "scope", "own"),
    [
        # Two nodes of one cluster on one machine (e.g. two network namespaces).
        (["raylet", f"--gcs-address={HEAD}:{PORT}", f"--node_ip_address={WORKER}"],
         Scope(PORT, WORKER, is_head=False), True),
        (["raylet", f"--gcs-address={HEAD}:{PORT}", f"--node_ip_address={HEAD}"],
         Scope(PORT, WORKER, is_head=False), False),
        (["gcs_server", f"--gcs_server_port={PORT}", f"--node-ip-address={HEAD}"],
         Scope(PORT, HEAD), True),
        (["python", "monitor.py", f"--gcs-address={HEAD}:{PORT}"], Scope(PORT, HEAD), True),
        (["python", "monitor.py", f"--gcs-address={HEAD}:{PORT}"],
         Scope(PORT, WORKER, is_head=False), False),  # names no node: the head's
        (["raylet", f"--gcs-address={HEAD}:{PORT}", f"--node_ip_address={WORKER}"],
         Scope(PORT), True),  # no node given: every node of the cluster on this machine
    ],
)  # fmt: skip
def test_down_on_one_node_stops_only_that_nodes_ray_processes(
    cmdline: list[str], scope: Scope, own: bool
) -> None:
    assert cluster_procs.is_own_ray_process(cmdline, scope) is own


def test_down_on_one_node_stops_only_that_nodes_engines() -> None:
    engine = {"PDSERVE_ENGINE_ROLE": "decode", "PDSERVE_GCS_ADDRESS": f"{HEAD}:{PORT}"}
    on_worker = {**engine, "PDSERVE_NODE_ADDRESS": WORKER}
    assert cluster_procs.is_own_engine(on_worker, Scope(PORT, WORKER, is_head=False))
    assert not cluster_procs.is_own_engine(on_worker, Scope(PORT, HEAD))
    assert cluster_procs.is_own_engine(on_worker, Scope(PORT))


def test_a_failed_start_s_status_message_keeps_the_exception_first() -> None:
    message = (
        "The deployment failed to start 3 times in a row. See controller logs for details. "
        'Error:\nTraceback (most recent call last):\n  File "replica.py", line 42, in init\n'
        "    await self._server.start()\n"
        "pdserve.engine.start_deadline.EngineStartTimeoutError: the decode engine was not "
        "ready within its start deadline (5 s, engine_start_timeout_seconds)\n"
    )
    summary = local_cluster.summarize_status_message(message)
    assert summary.startswith("pdserve.engine.start_deadline.EngineStartTimeoutError: the decode")
    assert summary.endswith("(The deployment failed to start 3 times in a row. See controller "
                            "logs for details.)")  # fmt: skip
    assert "Traceback" not in summary
    # Any other message: its first line.
    slow = "Deployment 'X' has 1 replicas that have taken more than 30s to initialize.\nmore"
    assert local_cluster.summarize_status_message(slow) == slow.splitlines()[0]
    assert local_cluster.summarize_status_message("  \n") == ""
