"""`pdserve profile` against the real local cluster (vLLM engines, NIXL, Ray Serve): the
cost-model fit and the simulator profile, with the short prompts the router prefills on the
decode engine measured on their own (alone and joining running decode batches)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

from pdserve.sim.profile import SimProfile
from tests.integration.cluster import PDSERVE, ROOT, Cluster


def test_profile_measures_the_prefill_line_and_the_local_path(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    sim, report = tmp_path / "sim.json", tmp_path / "profile.json"
    env = {k: v for k, v in os.environ.items() if k != "PDSERVE_API_KEY"}
    done = subprocess.run(
        [PDSERVE, "profile", "--url", cluster.url, "--config", str(ROOT / "deploy" / "local.yaml"),
         "--quick", "--repeats", "1", "--sim-profile", str(sim), "--json", str(report)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(report.read_text())
    # Every prefill-line prompt reached the prefill pool (the cold threshold is 128 tokens).
    assert doc["skipped_local_prefills"] == 0
    assert min(s["num_uncached_tokens"] for s in doc["prefill_samples"]) >= 128
    local = doc["local_prefill_samples"]
    alone = [s for s in local if s["batch_size"] == 0]
    beside = [s for s in local if s["batch_size"] > 0]
    assert sorted(s["num_prompt_tokens"] for s in alone) == [32, 64, 96]
    assert all(0 < s["first_token_s"] < 1 and s["decode_hops_s"] > 0 for s in local)
    assert len(beside) >= 2 and {s["batch_size"] for s in beside} <= {1, 8}
    prof = SimProfile.load(sim)
    assert prof.local_prefill_fixed_s is not None and 0 < prof.local_prefill_fixed_s < 0.2
    assert prof.local_hop_s is not None and 0 < prof.local_hop_s < 0.2
    assert prof.cpu_host is None  # idle: the CPU host's block is fitted on a loaded run
    assert "a prompt's fixed cost" in done.stdout and "a local prefill's hop" in done.stdout
