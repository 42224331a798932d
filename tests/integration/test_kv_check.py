"""`pdserve kv-check` for real: two NIXL agents in two processes (UCX, DRAM), no cluster.

These tests use none of the cluster fixtures of conftest.py; they start only kv-check itself,
on loopback.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "pdserve.cli", "kv-check"]
SIZES_UP_TO_16M = [4096 * 4**i for i in range(7)]
RUN_TIMEOUT_S = 120


def _kv_check(
    args: list[str], json_path: pathlib.Path, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = subprocess.run(
        [*CLI, *args, "--json", str(json_path)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, "COLUMNS": "120", **(env or {})},
    )
    report = json.loads(json_path.read_text()) if json_path.exists() else {}
    return proc, report


def test_same_node_read_and_write_against_memcpy(tmp_path: pathlib.Path) -> None:
    proc, report = _kv_check(
        ["--max-size", "16M", "--iterations", "5", "--write"], tmp_path / "kv.json"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (report["mode"], report["device"], report["expected"]) == ("same-node", "cpu", "any")
    rows = report["sizes"]
    for op in ("READ", "WRITE"):
        assert [r["bytes"] for r in rows if r["op"] == op] == SIZES_UP_TO_16M
    for row in rows:
        assert row["iterations"] == 5
        assert row["bandwidth_gbps"] > 0 and row["memcpy_bandwidth_gbps"] > 0
        assert row["ratio_to_memcpy"] == pytest.approx(
            row["bandwidth_gbps"] / row["memcpy_bandwidth_gbps"]
        )
        assert 0 < row["latency_p50_s"] <= row["latency_p99_s"]
        assert row["transports"], row
    # Detection read UCX's own protocol selection, not a guess from the endpoint's lanes.
    assert report["transports"] and report["transport_detection"] == "ucx-proto-info"
    assert report["fallback_to_tcp"] is False  # same node: shared memory (cma) is available
    assert "NIXL same-node" in proc.stdout and "memcpy GB/s" in proc.stdout


def test_tcp_only_transport_is_reported_as_silent_fallback(tmp_path: pathlib.Path) -> None:
    # UCX restricted to TCP on loopback: what a misconfigured RDMA node silently does.
    proc, report = _kv_check(
        ["--max-size", "64K", "--iterations", "3", "--expect", "rdma", "--strict"],
        tmp_path / "kv.json",
        env={"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"},
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert report["fallback_to_tcp"] is True and report["expectation_met"] is False
    assert report["transports"] == ["tcp/lo"]
    assert "silent fallback to TCP" in proc.stdout


def test_two_node_mode_over_loopback(tmp_path: pathlib.Path) -> None:
    serve = subprocess.Popen(
        [*CLI, "--serve", "--listen", "127.0.0.1:0", "--once"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert serve.stdout is not None
        first = serve.stdout.readline()
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)", first)
        assert match, first
        peer = f"127.0.0.1:{match.group(1)}"
        proc, report = _kv_check(
            ["--peer", peer, "--max-size", "64K", "--iterations", "3"], tmp_path / "kv.json"
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (report["mode"], report["peer"]) == ("two-node", peer)
        assert all(r["bandwidth_gbps"] > 0 for r in report["sizes"]) and report["transports"]
        assert serve.wait(timeout=30) == 0  # --once: the target exits after the session
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
