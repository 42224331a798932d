"""The router's measured pace in the simulator: its policy learns from the simulated engines'
prefills (scheduled → done), as the real router does from the engines' reports."""

from __future__ import annotations

import re

from pdserve.router.policy.config import PolicyConfig
from pdserve.sim.simulator import Simulation
from tests.unit.sim.helpers import BLOCK, COST, PROFILE, layout, request


def _paces(pace_weight: float) -> list[float]:
    """Five 2,000-token prompts a second apart (nothing queues) on 1P1D whose router predicts
    a third of what the engines take: each decision's measured prefill pace."""
    third = COST.model_copy(
        update={"fixed_overhead_s": COST.fixed_overhead_s / 3, "per_token_s": COST.per_token_s / 3}
    )
    policy = PolicyConfig(
        block_size_tokens=BLOCK,
        cost_model=third,
        local_prefill_max_cold_tokens=0,
        itl_slo_s=None,
        pace_weight=pace_weight,
    )
    requests = [request(i, 2000, out=1, at=float(i)) for i in range(5)]
    results = Simulation(layout(num_prefill=1, policy=policy), PROFILE).run(requests).results
    paces = []
    for r in results:
        assert r.decision is not None and r.decision.prefill_replica_id == "p0", r.decision
        found = re.search(r"measured pace prefill x([0-9.]+)", r.decision.reason)
        paces.append(float(found.group(1)) if found else float("nan"))
    return paces


def test_the_simulated_router_learns_the_engines_pace() -> None:
    paces = _paces(1.0)
    assert paces[0] == 1.0  # nothing measured yet
    assert all(2.7 <= p <= 3.3 for p in paces[1:]), paces
    assert all(p != p for p in _paces(0.0))  # off: no pace in the reasons
