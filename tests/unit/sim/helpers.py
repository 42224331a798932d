"""Shared builders of the simulator's unit tests: a simple cost model and profile, engine
limits, layouts, requests, and a bench report of a simulated run (what the bench would have
written had the simulated layouts been measured)."""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from collections.abc import Mapping

from pdserve.bench.config import BenchConfig
from pdserve.bench.models import PhaseOutcome
from pdserve.bench.report import BenchReport
from pdserve.bench.report_build import build_policy_report, compute_ratios
from pdserve.config import load_config
from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.cost_model import CostModel
from pdserve.sim.cpu_host import CpuHost
from pdserve.sim.engine import EngineLimits
from pdserve.sim.host import run_speed_factors
from pdserve.sim.layout import EngineSpec, SimLayout, layout_from_config
from pdserve.sim.predict import workload_requests
from pdserve.sim.profile import SimProfile
from pdserve.sim.report import as_bench_result
from pdserve.sim.simulator import Simulation
from pdserve.sim.workload import SimRequest

BLOCK = 16
COST = CostModel(
    fixed_overhead_s=0.01,
    per_token_s=1e-4,
    per_token_sq_s=0.0,
    kv_transfer_per_token_s=1e-5,
    decode_base_s=0.005,
    decode_per_seq_s=0.001,
    decode_per_context_token_s=0.0,
)
PROFILE = SimProfile(cost_model=COST, router_s=0.002, hop_s=0.001, kv_transfer_fixed_s=0.004)
"""No cpu_host block: every simulated time is exact."""


def limits(max_num_seqs: int = 64, chunk: int = 8192) -> EngineLimits:
    return EngineLimits(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=8192,
        chunk_tokens=chunk,
        block_size_tokens=BLOCK,
        kv_capacity_tokens=1 << 22,
    )


def layout(
    *,
    num_prefill: int = 0,
    num_decode: int = 1,
    max_num_seqs: int = 64,
    groups: tuple[str, ...] | None = None,
    interval_s: float = 0.0,
    policy: PolicyConfig | None = None,
) -> SimLayout:
    """Aggregated without prefill engines, else xPyD; one device per engine unless `groups`."""
    specs = [EngineSpec(f"p{i}", "prefill", limits(), f"p{i}") for i in range(num_prefill)]
    specs += [
        EngineSpec(f"d{i}", "decode", limits(max_num_seqs), f"d{i}") for i in range(num_decode)
    ]
    if groups is not None:
        specs = [
            EngineSpec(s.engine_id, s.pool, s.limits, g) for s, g in zip(specs, groups, strict=True)
        ]
    return SimLayout(
        name="t",
        aggregated=num_prefill == 0,
        engines=tuple(specs),
        policy=policy or PolicyConfig(block_size_tokens=BLOCK),
        stream_batch_interval_s=interval_s,
    )


def request(i: int, tokens: int, out: int = 1, at: float | None = 0.0) -> SimRequest:
    """Request i: a prompt of `tokens` unique tokens, `out` output tokens, sent at `at`."""
    return SimRequest(
        f"r{i}", "all", at, tokens, out, tuple(range(i * 1000, i * 1000 + tokens // BLOCK))
    )


def prefill_s(tokens: int) -> float:
    """A fresh prompt's prefill alone on an engine (COST has no attention term)."""
    return COST.fixed_overhead_s + COST.per_token_s * tokens


def simulated_report(
    layouts: Mapping[str, SimLayout], profile: SimProfile, cfg: BenchConfig, *, rounds: int = 1
) -> BenchReport:
    """The bench report a `--deployments` run of `layouts` would have written, had the layouts
    behaved as `profile` simulates them: each round of each layout is one simulated run (its
    own seed, and with a cpu_host block its own host speed)."""
    speeds = run_speed_factors(profile.host.round_speed_sigma, rounds)
    phases = []
    for index in range(rounds):
        for name, lay in layouts.items():
            requests = workload_requests(cfg, lay.engines[0].limits.block_size_tokens)
            sim = Simulation(
                lay, profile, concurrency=cfg.concurrency, seed=index, speed_factor=speeds[index]
            )
            outcome = sim.run(requests)
            results = tuple(as_bench_result(i, r) for i, r in enumerate(outcome.results))
            phases.append(PhaseOutcome(name, index, results, outcome.wall_s))
    policies = {
        name: build_policy_report([p for p in phases if p.policy == name], cfg) for name in layouts
    }
    config = {**cfg.model_dump(mode="json"), "rounds": rounds}
    return BenchReport(
        workload=cfg.workload, url="simulated", model="sim", config=config, calibration=None,
        policies=policies, ratios=compute_ratios(policies), interrupted=False, notes=[],
    )  # fmt: skip


LOCAL_PROFILE = SimProfile(
    cost_model=CostModel(
        fixed_overhead_s=0.0042,
        per_token_s=2e-5,
        per_token_sq_s=2e-9,
        kv_transfer_per_token_s=2.7e-7,
        decode_base_s=0.0046,
        decode_per_seq_s=2.4e-4,
        decode_per_context_token_s=1e-7,
    ),
    router_s=0.0012,
    hop_s=0.0045,
    kv_transfer_fixed_s=0.0071,
    local_prefill_fixed_s=0.003,
    local_hop_s=0.003,
    source="unit tests: the shape of an idle profile of deploy/local.yaml on a CPU machine",
)
"""An idle profile of the order of magnitude `pdserve profile --sim-profile` measures on the
local CPU cluster (numbers of that shape, not a recorded profile), for deploy/*.yaml layouts."""


ROOT = pathlib.Path(__file__).resolve().parents[3]
LOCAL_CONFIGS = {
    "aggregated": "local-aggregated.yaml",
    "1p1d": "local.yaml",
    "2p1d": "local-2p1d.yaml",
}
"""The three layouts of the local CPU machine (deploy/), by the names the benches give them."""
TRUTH_HOST = CpuHost(
    host_cores=2,
    host_contention=4.0,
    engine_step_extra_s=0.0008,
    prefill_step_factor=1.4,
    local_prefill_load_factor=1.6,
    local_hop_load_factor=1.3,
    step_speed_sigma=0.1,
    serving_jitter_sigma=0.4,
    decode_jitter_sigma=0.3,
    local_jitter_sigma=0.8,
    router_s=0.001,
    router_per_token_s=3e-6,
    client_s=0.005,
    client_per_token_s=6e-6,
    client_jitter_sigma=0.4,
    local_intake_per_token_s=6e-6,
)
"""The host the synthetic measured run was "measured" on (`measured_run`)."""
RUN_WORKLOAD = BenchConfig(workload="mixed", num_requests=100, request_rate=4.0, concurrency=32)


def local_layouts(*names: str, itl_guard: bool = True) -> dict[str, SimLayout]:
    """The named local layouts (all three by default), from their deploy/ configs.
    `itl_guard` False: with router.routing.itl_slo_s null (the ITL guard off: local prefills
    on the cold-token rule and spill-over alone, in the engines' configured chunks), as
    every deployment ran before the guard existed."""
    layouts = {
        n: layout_from_config(load_config(ROOT / "deploy" / LOCAL_CONFIGS[n]), name=n)
        for n in names or LOCAL_CONFIGS
    }
    if itl_guard:
        return layouts
    return {
        n: dataclasses.replace(lay, policy=lay.policy.model_copy(update={"itl_slo_s": None}))
        for n, lay in layouts.items()
    }


@functools.cache
def measured_run(rounds: int = 1, *, itl_guard: bool = True) -> BenchReport:
    """A stand-in for a measured `pdserve bench --deployments` run of the three local layouts:
    the bench report of their simulation with LOCAL_PROFILE and TRUTH_HOST (cached; do not
    modify it); `itl_guard` as `local_layouts` takes it."""
    truth = LOCAL_PROFILE.with_host(TRUTH_HOST)
    layouts = local_layouts(itl_guard=itl_guard)
    return simulated_report(layouts, truth, RUN_WORKLOAD, rounds=rounds)


def write_run(folder: pathlib.Path, rounds: int = 1) -> pathlib.Path:
    """`measured_run(rounds)` written as the bench writes its --json report, its deployments
    naming the deploy/ configs (what `simulate --measured` and `tune --fit-on` read)."""
    report = measured_run(rounds)
    deployments = [f"{n}={ROOT / 'deploy' / c}" for n, c in LOCAL_CONFIGS.items()]
    doc = report.model_copy(update={"config": {**report.config, "deployments": deployments}})
    path = folder / f"run-{rounds}.json"
    path.write_text(doc.model_dump_json())
    return path
