"""pdserve across two hosts that share no network address (two network namespaces joined by
a veth pair): each pool runs on the node that carries it, a request's KV crosses the link over
NIXL with output token-identical to aggregated vLLM, and `pdserve kv-check` between the two
hosts measures the same link."""

from __future__ import annotations

import json
import os
import pathlib
import select
import subprocess
import sys
import time

import openai
import psutil

from pdserve.bench.fault_inject import FaultError, engine_cores
from pdserve.cluster_procs import Scope, is_own_engine
from pdserve.names import PoolName
from tests.integration.cluster import PDSERVE
from tests.integration.texts import text_of_words
from tests.integration.two_node.netns import LINK
from tests.integration.two_node.nodes import RAY_PORT, TwoNodes

MAX_TOKENS = 16
PROBE = [sys.executable, "-m", "tests.integration.two_node.probe"]


def _netns_inode(name: str) -> int:
    return os.stat(f"/var/run/netns/{name}").st_ino


def _process_netns_inode(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def _engine_namespaces(
    expected: dict[PoolName, int], timeout_s: float = 240.0
) -> dict[str, list[int]]:
    """The network namespace of each engine-core process, by pool, once as many are listed as
    `expected` (a just-started engine can take a moment to show under its process name; on
    the busy CI machine one decode engine was not listed within 60 s, so the wait also covers
    an engine replaced after a slow start, which took up to 199 s there)."""
    deadline = time.monotonic() + timeout_s
    while True:
        where: dict[str, list[int]] = {}
        for role in expected:
            try:
                where[role] = [_process_netns_inode(p.pid) for p in engine_cores(RAY_PORT, role)]
            except FaultError:
                where[role] = []
        counts = {role: len(found) for role, found in where.items()}
        if counts == expected or time.monotonic() > deadline:
            return where
        time.sleep(1)


def _engine_processes() -> list[str]:
    """Every process carrying an engine marker of this cluster, with its role, parent and
    network namespace (what a failure shows: a CI run once listed no prefill engine for
    240 s)."""
    seen = []
    for proc in psutil.process_iter(["environ", "ppid", "name"], ad_value=None):
        env = proc.info["environ"] or {}
        if "PDSERVE_ENGINE_ROLE" not in env or not is_own_engine(env, Scope(RAY_PORT)):
            continue
        try:
            netns: int | str = _process_netns_inode(proc.pid)
        except OSError as exc:
            netns = str(exc)
        seen.append(f"{proc.pid} ({proc.info['name']}, parent {proc.info['ppid']}) "
                    f"role={env['PDSERVE_ENGINE_ROLE']} netns={netns}")  # fmt: skip
    return seen


def test_each_pool_runs_on_the_node_that_carries_it(two_nodes: TwoNodes) -> None:
    # The GPU example's layout: 2 prefill replicas on the head (the only node advertising
    # pdserve_prefill), 1 decode replica on the joined node (pdserve_decode).
    where = _engine_namespaces({"prefill": 2, "decode": 1})
    head, worker = _netns_inode(two_nodes.head.netns), _netns_inode(two_nodes.worker.netns)
    if where != {"prefill": [head, head], "decode": [worker]}:
        raise AssertionError(
            f"engines by namespace {where}, expected prefill {[head, head]} and decode "
            f"{[worker]}; marked processes: {_engine_processes()}\nthe router's replicas: "
            f"{_router_replicas(two_nodes)}"
        )


def _router_replicas(two_nodes: TwoNodes) -> str:
    """GET /v1/pdserve/replicas from inside the head's namespace (or why it failed)."""
    get = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())"
    argv = [sys.executable, "-c", get, f"{two_nodes.url}/v1/pdserve/replicas"]
    try:
        return two_nodes.run(two_nodes.head, argv, timeout_s=30)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"


def _reference_texts(reference: openai.OpenAI, prompts: list[str]) -> list[str]:
    texts = []
    for prompt in prompts:
        resp = reference.completions.create(
            model="pdserve-demo", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, seed=7
        )
        texts.append(resp.choices[0].text)
    return texts


def test_kv_crosses_the_link_and_output_matches_aggregated(
    two_nodes: TwoNodes, reference: openai.OpenAI
) -> None:
    head, worker = two_nodes.head, two_nodes.worker
    prompts = [text_of_words(300, salt=900 + i) for i in range(3)]  # cold: prefilled remotely
    stats = [*PROBE, "stats", two_nodes.gcs_address]
    before = json.loads(two_nodes.run(head, stats))
    sent_before = two_nodes.link.bytes_sent(head)
    received_before = two_nodes.link.bytes_received(worker)
    complete = [*PROBE, "complete", two_nodes.url, str(MAX_TOKENS)]
    out = json.loads(two_nodes.run(head, complete, stdin=json.dumps(prompts)))
    sent = two_nodes.link.bytes_sent(head) - sent_before
    received = two_nodes.link.bytes_received(worker) - received_before
    after = json.loads(two_nodes.run(head, stats))

    for result in out:  # every prompt went prefill (head) -> KV -> decode (worker)
        assert result["decision"]["prefill"] is not None, result["decision"]
        assert result["served_by"]["prefill"] == result["decision"]["prefill"]
    assert [r["text"] for r in out] == _reference_texts(reference, prompts)

    pulls = after["num_kv_transfers_total"] - before["num_kv_transfers_total"]
    kv_bytes = after["kv_transfer_bytes_total"] - before["kv_transfer_bytes_total"]
    kv_tokens = after["prompt_tokens_kv_transfer_total"] - before["prompt_tokens_kv_transfer_total"]
    assert pulls >= len(prompts) and kv_tokens > 0 and kv_bytes > 0, (before, after)
    # The decode engine's NIXL reads moved kv_bytes; all of it crossed the veth link from the
    # head to the worker (the kernel's counters on both ends), plus TCP/UCX framing.
    assert sent >= kv_bytes and received >= kv_bytes, (sent, received, kv_bytes)


def _wait_for_line(proc: subprocess.Popen[str], text: str, timeout_s: float) -> None:
    """Read `proc`'s output until a line contains `text` (the target is listening)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            seen.append(line)
            if text in line:
                return
            if not line and proc.poll() is not None:
                break
    raise AssertionError(f"no {text!r} from the kv-check target: {''.join(seen)[-2000:]}")


def test_kv_check_between_the_hosts_measures_the_link(
    two_nodes: TwoNodes, tmp_path: pathlib.Path
) -> None:
    head, worker = two_nodes.head, two_nodes.worker
    listen = f"{head.address}:14515"
    report_path = tmp_path / "kv-check.json"
    ucx = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": LINK}
    env = {**two_nodes.envs[head.netns], **ucx}
    target = subprocess.Popen(
        head.cmd([PDSERVE, "kv-check", "--serve", "--listen", listen, "--once"]),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        _wait_for_line(target, "listening on", timeout_s=120)
        sent_before = two_nodes.link.bytes_sent(head)
        proc = subprocess.run(
            worker.cmd([PDSERVE, "kv-check", "--peer", listen, "--sizes", "64K,4M",
                        "--iterations", "5", "--json", str(report_path)]),
            env={**two_nodes.envs[worker.netns], **ucx},
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        sent = two_nodes.link.bytes_sent(head) - sent_before
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert target.wait(timeout=60) == 0  # --once: the target ends with the check
    finally:
        target.kill()
    report = json.loads(report_path.read_text())
    assert report["mode"] == "two-node"
    assert report["peer"] == listen
    assert report["transports"] == [f"tcp/{LINK}"], report  # UCX's TCP over the veth link
    moved = sum(row["bytes"] * row["iterations"] for row in report["sizes"])
    assert moved >= 5 * (64 << 10) + 5 * (4 << 20)
    assert sent >= moved, (sent, moved)  # decode-side READs pull the head's memory over the link
