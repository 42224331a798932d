"""The modules an engine process loads keep numba (and llvmlite) out: when a vLLM CPU worker
starts, it scans every loaded module for Triton kernels to rebind and fails on an llvmlite
object ("'_lib_fn_wrapper' object has no attribute 'get'"). A worker started by spawn loads its
parent's main module, so the processes that start engines outside Ray (the start-deadline
probe, the warm-up bench) must not load numba either. The router's compiled kernels
(router/policy/block_table.py, pool_kernel.py, router/int_map.py) are loaded only where they
run."""

from __future__ import annotations

import subprocess
import sys

import pytest

ENGINE_SIDE = [
    "pdserve.config",
    "pdserve.engine.server",
    "pdserve.prefill_pool.server",
    "pdserve.decode_pool.server",
    "pdserve.kv_transfer.verified_connector",
    "pdserve.kv_transfer.vllm_plugin",
    "pdserve.bench.engine_warmup",
    "tests.integration.engine_start_probe",
]


@pytest.mark.parametrize("module", ENGINE_SIDE)
def test_engine_side_modules_do_not_load_numba(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite'))[:3])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_the_router_policy_still_loads_its_kernels_on_use() -> None:
    code = (
        "import sys, pdserve.router.policy as p\n"
        "assert 'numba' not in sys.modules\n"
        "p.RoutingPolicy, p.PrefixIndex\n"
        "print('numba' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip().splitlines()[-1] == "True", out.stdout + out.stderr
