"""The pooled idle profiles of runs T-X (one VM, 2026-12-04): what `pdserve profile --pool`
would have written at each run had it pooled that run's profile with the VM's earlier ones.

The recorded reports predate serving samples in `--json`, so the pool refits the engine
terms (cost model, a local prefill's fixed cost and hop) on the pooled samples and keeps the
run's own serving terms (hop, router, KV transfer): the command takes those from the samples
it has, and only the run itself had them."""

from __future__ import annotations

import pathlib

from pdserve.config import load_config
from pdserve.profiling.pool import fit_cost_model, pooled, read_report
from pdserve.sim.fit import local_hop_s, local_prefill_fixed_s
from pdserve.sim.profile import SimProfile

REPO = pathlib.Path(__file__).resolve().parents[3]
RESULTS = REPO / "bench" / "results"
VM_RUNS = ("t", "u", "v", "w", "x")
"""Runs T-X in the order they ran, all on one VM; each was profiled just before its run."""


def pooled_profile(run: str, first: str = "t") -> SimProfile:
    """Run `run`'s idle profile refitted on the samples of every profile of the VM from run
    `first` to it (module docstring)."""
    names = VM_RUNS[VM_RUNS.index(first) : VM_RUNS.index(run) + 1]
    samples = pooled([read_report(RESULTS / f"profile-local-{n}.json") for n in names])
    own = SimProfile.load(RESULTS / f"sim-profile-local-{run}.json")
    base = load_config(REPO / "deploy" / "local.yaml").router.routing.cost_model
    fitted = fit_cost_model(samples, base).model
    per_token_s = own.cost_model.kv_transfer_per_token_s  # fitted on the serving samples
    cost_model = fitted.model_copy(update={"kv_transfer_per_token_s": per_token_s})
    return own.model_copy(
        update={
            "cost_model": cost_model,
            "local_prefill_fixed_s": local_prefill_fixed_s(cost_model, samples.local_prefill),
            "local_hop_s": local_hop_s(samples.local_prefill),
            "source": f"{own.source}, pooled: profile-local-{'/'.join(names)}.json",
        }
    )
