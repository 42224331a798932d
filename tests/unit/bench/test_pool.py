"""Pooling bench runs (pdserve.bench.pool) on run AN's two recorded pilots (two rounds each,
twenty minutes apart, seeds 3 and 4): a run pooled alone rebuilds to itself, two pool into one
of four rounds whose percentiles are the requests' own, and runs of another workload or other
deployments are refused."""

from __future__ import annotations

import pathlib

import pytest

from pdserve.bench.config import BenchConfig
from pdserve.bench.pool import _pool_policy, pool_runs
from pdserve.bench.report import BenchReport
from pdserve.bench.stats import percentile

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "sim" / "fixtures"


def _run(name: str) -> BenchReport:
    return BenchReport.model_validate_json((FIXTURES / name).read_text())


@pytest.fixture(scope="module")
def pilots() -> tuple[BenchReport, BenchReport]:
    return _run("mixed-3way-600-run-an-pilot.json"), _run("mixed-3way-600-run-an-pilot2.json")


def test_a_run_pooled_with_itself_once_rebuilds_every_field(
    pilots: tuple[BenchReport, BenchReport],
) -> None:
    """The metrics rebuilt from the kept requests are the ones the bench wrote: pooling one
    run's deployment with the same code path as many (pool_runs of one returns it as is)."""
    run = pilots[0]
    cfg = BenchConfig.model_validate(
        {**run.config, "deployments": (), "policies": (), "json_path": None}
    )
    for name, policy in run.policies.items():
        assert _pool_policy([policy], name, cfg).model_dump() == policy.model_dump()
    assert pool_runs([run]) is run


def test_two_pilots_pool_into_one_run_of_all_their_rounds(
    pilots: tuple[BenchReport, BenchReport],
) -> None:
    a, b = pilots
    pooled = pool_runs([a, b])
    assert pooled.config["rounds"] == 4 and pooled.config["seed"] == a.config["seed"]
    assert pooled.notes[-1] == "pooled from 2 runs (4 rounds)"
    for name, p in pooled.policies.items():
        pa, pb = a.policies[name], b.policies[name]
        assert p.num_requests == pa.num_requests + pb.num_requests == 1200
        assert p.num_phases == 4 and p.wall_s == pytest.approx(pa.wall_s + pb.wall_s)
        assert [q.round_index for q in p.requests or []] == (
            [q.round_index for q in pa.requests or []]
            + [q.round_index + 2 for q in pb.requests or []]
        )
        for cls in ("short", "long"):  # each percentile over both runs' requests
            ttfts = [
                q.ttft_s
                for q in [*(pa.requests or []), *(pb.requests or [])]
                if q.request_class == cls and q.error is None and q.ttft_s is not None
            ]
            assert p.classes is not None
            assert p.classes[cls].ttft_p50_s == percentile(ttfts, 50)
            low, high = sorted(
                m.ttft_p50_s or 0.0 for m in ((pa.classes or {})[cls], (pb.classes or {})[cls])
            )
            assert low <= (p.classes[cls].ttft_p50_s or 0.0) <= high
        for stage, stats in (p.stages or {}).items():  # every request's timeline counted
            assert stats.num_requests == sum((m.stages or {})[stage].num_requests for m in (pa, pb))


def test_runs_of_another_workload_are_refused(pilots: tuple[BenchReport, BenchReport]) -> None:
    a, b = pilots
    other = b.model_copy(update={"config": {**b.config, "request_rate": 8.0}})
    with pytest.raises(ValueError, match="run 2 differs from run 1 in request_rate"):
        pool_runs([a, other])


def test_runs_of_other_deployments_are_refused(pilots: tuple[BenchReport, BenchReport]) -> None:
    a, b = pilots
    fewer = {k: v for k, v in b.policies.items() if k != "2p1d"}
    with pytest.raises(ValueError, match="run 2 measured aggregated, 1p1d, run 1"):
        pool_runs([a, b.model_copy(update={"policies": fewer})])


def test_runs_without_kept_requests_are_refused(pilots: tuple[BenchReport, BenchReport]) -> None:
    a, b = pilots
    bare = {k: v.model_copy(update={"requests": None}) for k, v in b.policies.items()}
    with pytest.raises(ValueError, match="kept no requests"):
        pool_runs([a, b.model_copy(update={"policies": bare})])
