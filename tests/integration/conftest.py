"""The real local cluster (Ray Serve + vLLM CPU + NIXL), started once per test session.

`cluster` runs `pdserve up --detach` with deploy/local.yaml on test ports and `pdserve down`
at the end. `reference` is one aggregated vLLM OpenAI server of the same model and engine
settings (no disaggregation), the oracle for token-identical output; it starts with the
session (beside the first package's cluster) and serves every cluster of the session (the 2P1D
and two-node packages' too). The helpers
these fixtures (and the packages' own) use are in cluster.py.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import yaml

from pdserve.config import load_config
from pdserve.model_source import resolve_model
from tests.integration.cluster import (
    PDSERVE,
    RAY_METRICS_PORT,
    RAY_PORT,
    REFERENCE_PORT,
    ROOT,
    ROUTER_PORT,
    START_TIMEOUT_S,
    Cluster,
    kill_tree,
    run_up,
    start_reference,
    startup_failure,
    wait_http,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the packages with clusters of their own first, one at a time, before the session
    cluster starts: the 2 prefill + 1 decode package (its fault tests time engine
    replacements, which a 2-core machine running two more clusters' engines slows
    several-fold), then the two-node package, the autoscaling one, the aggregated one and the
    KV-integrity one (its fault cases: corrupted, stale and swapped handoffs).
    Each stops its cluster when it ends, so the session cluster's tests then run alone too."""
    order = ("/two_prefill/", "/two_node/", "/autoscale/", "/aggregated/", "/kv_integrity/")
    first = [i for key in order for i in items if key in str(i.path)]
    if first:
        items[:] = first + [i for i in items if i not in first]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cluster")
    raw = yaml.safe_load((ROOT / "deploy" / "local.yaml").read_text())
    raw["router"]["port"] = ROUTER_PORT
    cfg_path = tmp / "test.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(cfg_path)
    model_path = resolve_model(cfg.model)
    env = {
        **os.environ,
        "PDSERVE_STATE_DIR": str(tmp / "state"),
        "PDSERVE_RAY_PORT": str(RAY_PORT),
        "PDSERVE_RAY_METRICS_PORT": str(RAY_METRICS_PORT),
    }
    env.pop("PDSERVE_API_KEY", None)  # this cluster's API is open (two_prefill's has a key)
    up = run_up(PDSERVE, cfg_path, env)
    try:
        if up.returncode != 0:
            raise RuntimeError(startup_failure(up))
        os.environ["PDSERVE_RAY_PORT"] = str(RAY_PORT)
        yield Cluster(f"http://127.0.0.1:{ROUTER_PORT}", cfg, model_path)
    finally:
        with contextlib.suppress(Exception):
            import ray

            ray.shutdown()
        subprocess.run([PDSERVE, "down"], env=env, capture_output=True, timeout=120)


@pytest.fixture(scope="session", autouse=True)
def reference_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[subprocess.Popen[bytes], pathlib.Path]]:
    """The reference server's process, started with the session (without waiting for it), so
    its start-up overlaps the first package's cluster start instead of adding to it."""
    tmp = tmp_path_factory.mktemp("reference")
    cfg = load_config(ROOT / "deploy" / "local.yaml")
    log = tmp / "reference.log"
    server = start_reference(resolve_model(cfg.model), cfg, log)
    try:
        yield server, log
    finally:
        kill_tree(server)


@pytest.fixture(scope="session")
def reference(
    reference_server: tuple[subprocess.Popen[bytes], pathlib.Path],
) -> openai.OpenAI:
    server, log = reference_server
    url = f"http://127.0.0.1:{REFERENCE_PORT}"
    try:
        wait_http(f"{url}/health", server, START_TIMEOUT_S)
    except Exception as exc:
        raise RuntimeError(f"reference vLLM server did not start: {exc}\n"
                           f"{log.read_text()[-3000:]}") from exc  # fmt: skip
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="session")
def engine_handles(cluster: Cluster) -> dict[str, Any]:
    """Ray Serve handles to the prefill and decode deployments (for their engine stats)."""
    import ray
    from ray import serve

    ray.init(address=f"127.0.0.1:{RAY_PORT}", logging_level="ERROR", log_to_driver=False)
    app = cluster.config.app_name
    return {
        "prefill": serve.get_deployment_handle("PrefillServer", app_name=app),
        "decode": serve.get_deployment_handle("DecodeServer", app_name=app),
    }
