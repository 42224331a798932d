"""Measure a simulator profile on a running cluster (adapter): what `pdserve profile
--sim-profile` does, without its tables, for `pdserve sim-check`.

The same plan (`pdserve.profiling.plan.make_plan` for the config's limits), the same
measurements (`Profiler`), the same fits (`fit_cost_model`, `fit_sim_profile`). Raises
ValueError (a `ProfileError` included) with a message for the user when measuring or fitting
fails.
"""

from __future__ import annotations

import datetime

from rich.console import Console

from pdserve.config import PdserveConfig
from pdserve.profiling.measure import Profiler
from pdserve.profiling.plan import make_plan
from pdserve.profiling.pool import ProfileSamples, fit_cost_model
from pdserve.profiling.samples import ProfileError
from pdserve.sim.fit import fit_sim_profile
from pdserve.sim.profile import SimProfile


async def measure_sim_profile(url: str, cfg: PdserveConfig, console: Console) -> SimProfile:
    """The idle engines and serving layer of the cluster at `url`, deployed from `cfg`."""
    routing = cfg.router.routing
    plan = make_plan(
        quick=False,
        repeats=3,
        max_prompt_tokens=3000,
        max_model_len_tokens=cfg.model.max_model_len_tokens,
        min_extra_tokens=routing.local_prefill_max_uncached_tokens,
        min_prompt_tokens=routing.local_prefill_max_cold_tokens,
    )
    done = 0

    def progress(what: str) -> None:
        nonlocal done
        done += 1
        if done % 25 == 0 or done == plan.num_requests():
            console.print(f"  profile: {done}/{plan.num_requests()} requests ({what})")

    profiler = Profiler(url, plan, progress=progress)
    try:
        measured = await profiler.run()
    except ProfileError as exc:
        raise ValueError(str(exc)) from exc
    samples = ProfileSamples(
        source="this run",
        model=profiler.model or "",
        prefill=tuple(measured.prefill),
        decode=tuple(b.sample() for b in measured.batches),
        local_prefill=tuple(measured.local_prefill),
        serving=tuple(measured.serving),
    )
    cost = fit_cost_model(samples, routing.cost_model).model
    return fit_sim_profile(
        cost,
        samples.serving,
        source=f"pdserve sim-check profile of {url} on {datetime.date.today().isoformat()}",
        local_prefill=samples.local_prefill,
    )
