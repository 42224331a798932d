"""A two-node cluster: the GPU example's pool layout (2 prefill + 1 decode, each pool pinned by
its Ray resource) on CPU, its prefill pool on the head in one network namespace and its decode
pool on a joined node in another, the two linked only by a veth pair. Started with the real
commands (`pdserve up --head --pool prefill`, `pdserve join HEAD --pool decode`) and stopped
with `pdserve down` on each node, which must leave nothing behind. The cluster's parts are in
nodes.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from pdserve import cluster_procs
from tests.integration.two_node.layout import gpu_example_on_cpu
from tests.integration.two_node.netns import NamespaceUnavailable, two_hosts
from tests.integration.two_node.nodes import (
    RAY_PORT,
    ROUTER_PORT,
    TwoNodes,
    down_nodes,
    node_env,
    start_nodes,
)


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
        envs = {h.netns: node_env(tmp, h.netns) for h in (link.a, link.b)}
        nodes = TwoNodes(link, config_path, envs)
        try:
            start_nodes(nodes, tmp / "up.log")
        except BaseException:
            down_nodes(nodes)
            raise
        try:
            yield nodes
        finally:
            outputs = down_nodes(nodes)
            left = cluster_procs.leftovers(cluster_procs.Scope(RAY_PORT), shm_before)
            assert not left, f"`pdserve down` on both nodes left behind: {left}\n{outputs}"
    finally:
        hosts.__exit__(None, None, None)
