"""`pdserve tune`'s search, its config and Helm output, and the simulator profile fit."""

from __future__ import annotations

import pathlib

import pytest
import yaml
from typer.testing import CliRunner

from pdserve.bench.config import BenchConfig
from pdserve.bench.report import Metrics
from pdserve.cli import app
from pdserve.config import PdserveConfig, load_config
from pdserve.profiling.samples import ServingSample
from pdserve.router.policy.cost_model import CostModel
from pdserve.sim.fit import fit_sim_profile
from pdserve.sim.predict import Prediction
from pdserve.sim.profile import SimProfile
from pdserve.sim.search import (
    P99_TIE,
    Candidate,
    Ranked,
    Scored,
    apply,
    candidates,
    meets_target,
    order,
    rank,
    typical_ttft_s,
)
from pdserve.sim.tune_cli import helm_values, itl_bound_s

ROOT = pathlib.Path(__file__).resolve().parents[3]
LOCAL = load_config(ROOT / "deploy" / "local.yaml")


def test_the_search_covers_every_layout_within_the_budget() -> None:
    points = candidates(3, [512, None], [0, 128])
    shapes = {(c.mode, c.num_prefill, c.num_decode) for c in points}
    assert shapes == {
        ("aggregated", 0, 1), ("aggregated", 0, 2), ("aggregated", 0, 3),
        ("disaggregated", 1, 1), ("disaggregated", 1, 2), ("disaggregated", 2, 1),
    }  # fmt: skip
    assert len(points) == 2 * (3 + 3 * 2)
    assert all(c.num_devices <= 3 for c in points)
    assert not any(c.mode == "aggregated" for c in candidates(3, [None], [0], aggregated=False))
    with pytest.raises(ValueError, match="budget"):
        candidates(0, [None], [0])


def test_a_candidate_becomes_a_valid_config_with_one_core_per_engine() -> None:
    agg = apply(LOCAL, Candidate("aggregated", 0, 2, 512, 0))
    assert agg.aggregated and agg.decode.num_replicas == 2
    assert agg.decode.cpu_cores_per_replica == [[0], [1]]
    assert agg.decode.engine.prefill_chunk_tokens == 512
    pd = apply(LOCAL, Candidate("disaggregated", 2, 1, None, 128))
    assert (pd.prefill.num_replicas, pd.decode.num_replicas) == (2, 1)
    assert pd.prefill.cpu_cores_per_replica == [[0], [1]]
    assert pd.decode.cpu_cores_per_replica == [[2]]
    assert pd.router.routing.local_prefill_max_cold_tokens == 128
    assert pd.model == LOCAL.model and pd.router.admission == LOCAL.router.admission
    gpu = apply(
        PdserveConfig.model_validate(
            {"platform": "cuda", "prefill": {"num_gpus": 1}, "decode": {"num_gpus": 1}}
        ),
        Candidate("disaggregated", 1, 3, None, 0),
    )
    assert gpu.decode.num_gpus == 1 and gpu.decode.cpu_cores_per_replica is None


def _profile() -> SimProfile:
    return SimProfile(
        cost_model=CostModel(fixed_overhead_s=0.02, per_token_s=2e-4, per_token_sq_s=0.0),
        hop_s=0.002,
    )


def test_the_cheapest_layout_that_meets_the_target_ranks_first() -> None:
    workload = BenchConfig(
        workload="mixed", num_requests=300, request_rate=4.0, concurrency=64,
        slo_ttft_s=1.5, slo_tpot_s=0.1,
    )  # fmt: skip
    ranked = rank(LOCAL, _profile(), workload, candidates(3, [512], [0]), target_goodput=0.9)
    goodputs = [r.prediction.metrics.goodput_fraction or 0 for r in ranked]
    meeting = [r for r, g in zip(ranked, goodputs, strict=True) if g >= 0.9]
    assert meeting, "some layout must meet 90 % here"
    assert ranked[: len(meeting)] == meeting  # every layout that meets the target first
    assert ranked[0].candidate.num_devices == min(r.candidate.num_devices for r in meeting)


def test_helm_values_size_the_worker_groups_and_refuse_aggregated() -> None:
    workload = BenchConfig(workload="mixed", num_requests=50, request_rate=2.0)
    [best] = rank(LOCAL, _profile(), workload, [Candidate("disaggregated", 2, 1, 512, 128)])
    values = helm_values(best)
    assert values["prefill"]["replicas"] == 2 and values["decode"]["maxReplicas"] == 1
    assert values["pdserve"]["prefill"] == {
        "num_replicas": 2, "autoscaling": None, "engine": {"prefill_chunk_tokens": 512},
    }  # fmt: skip
    [agg] = rank(LOCAL, _profile(), workload, [Candidate("aggregated", 0, 2, 512, 0)])
    with pytest.raises(ValueError, match="aggregated"):
        helm_values(agg)


def test_tune_writes_a_config_that_deploys(tmp_path: pathlib.Path) -> None:
    prof = tmp_path / "profile.json"
    prof.write_text(_profile().model_dump_json())
    out = tmp_path / "recommended.yaml"
    result = CliRunner().invoke(
        app,
        [
            "tune", "--profile", str(prof), "--config", str(ROOT / "deploy" / "local.yaml"),
            "--devices", "2", "--num-requests", "100", "--request-rate", "3",
            "--chunk-tokens", "512", "--local-thresholds", "0", "--write", str(out),
            # This profile's slow steps (a 512-token chunk alone takes 0.12 s) break the
            # config's ITL SLO (0.1 s, the default bound) in every layout: no ITL bound here.
            "--max-itl-p99-s", "0",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "recommended:" in result.output
    # The mixed workload's two classes get a table of their own (p50 / p99 each).
    assert "TTFT per request class" in result.output
    assert "short" in result.output and "long" in result.output
    cfg = load_config(out)
    assert cfg.model == LOCAL.model
    assert yaml.safe_load(out.read_text()) is not None


def test_tune_rejects_bad_knob_lists(tmp_path: pathlib.Path) -> None:
    prof = tmp_path / "profile.json"
    prof.write_text(_profile().model_dump_json())
    result = CliRunner().invoke(
        app,
        ["tune", "--profile", str(prof), "--config", str(ROOT / "deploy" / "local.yaml"),
         "--devices", "2", "--chunk-tokens", "512,-3"],
    )  # fmt: skip
    assert result.exit_code == 2 and "-3" in result.output


def test_the_serving_latencies_are_fitted_from_idle_samples() -> None:
    samples = [
        ServingSample(n, router_s=0.003 + 1e-6 * n, prefill_hops_s=0.006,
                      kv_wait_s=0.01 + 2e-6 * n, decode_hops_s=0.010, decode_first_token_s=0.02)
        for n in (256, 1024, 2048, 3000)
    ]  # fmt: skip
    prof = fit_sim_profile(CostModel(), samples, source="test")
    assert prof.router_s == pytest.approx(0.003)
    assert prof.router_per_token_s == pytest.approx(1e-6)
    assert prof.cpu_host is None  # an idle profile: the host block comes from a loaded run
    assert prof.hop_s == pytest.approx(0.004)
    assert prof.kv_transfer_fixed_s == pytest.approx(0.01)
    assert prof.cost_model.kv_transfer_per_token_s == pytest.approx(2e-6)
    with pytest.raises(ValueError, match="two prompt lengths"):
        fit_sim_profile(CostModel(), samples[:1], source="test")


def test_p99_bounds_turn_a_layout_down_whatever_its_goodput() -> None:
    workload = BenchConfig(workload="mixed", num_requests=100, request_rate=3.0)
    [r] = rank(LOCAL, _profile(), workload, [Candidate("aggregated", 0, 1, None, 0)])
    itl_p99 = r.prediction.metrics.itl_p99_s
    assert itl_p99 is not None and (r.prediction.metrics.goodput_fraction or 0) >= 0.9
    assert meets_target(r, 0.9)
    assert meets_target(r, 0.9, max_itl_p99_s=itl_p99 * 1.01)
    assert not meets_target(r, 0.9, max_itl_p99_s=itl_p99 * 0.99)
    assert not meets_target(r, 0.9, max_ttft_p99_s=0.0)


def _metrics(p99_s: float | None, p50_s: float | None) -> Metrics:
    fields = {f: None for f in Metrics.model_fields if f not in ("num_requests", "num_errors")}
    return Metrics.model_validate(
        {**fields, "num_requests": 1, "num_errors": 0, "ttft_p99_s": p99_s, "ttft_p50_s": p50_s}
    )


def _ranked(
    label: int,
    p99_s: float,
    p50_s: float,
    devices: int = 2,
    classes: dict[str, float] | None = None,
) -> Ranked:
    """A ranked candidate with the given TTFT p99 / p50 (and per-class TTFT p50s)."""
    per_class = {name: _metrics(None, p50) for name, p50 in (classes or {}).items()}
    candidate = Candidate("disaggregated", 1, devices - 1, label, 0)
    prediction = Prediction(str(label), None, _metrics(p99_s, p50_s), per_class)  # type: ignore[arg-type]
    return Ranked(candidate, LOCAL, prediction)


def _scored(r: Ranked) -> Scored:
    return Scored(r.prediction.metrics, r.prediction.classes, r.candidate.num_devices)


def test_the_typical_ttft_is_the_geometric_mean_of_the_classes_p50s() -> None:
    """Short 0.02 s and long 0.5 s: 0.1 s, whatever the all-request p50 (which falls between
    the two); one class or none: the all-request p50; a class without a p50: None."""
    both = _ranked(1, 0.4, 0.3, classes={"short": 0.02, "long": 0.5}).prediction
    assert typical_ttft_s(both) == pytest.approx(0.1)
    assert typical_ttft_s(_ranked(1, 0.4, 0.3).prediction) == 0.3
    assert typical_ttft_s(_ranked(1, 0.4, 0.3, classes={"all": 0.2}).prediction) == 0.3
    missing = _ranked(1, 0.4, 0.3, classes={"short": 0.0, "long": 0.5}).prediction
    assert typical_ttft_s(missing) is None


def test_with_request_classes_a_tie_goes_to_the_lower_typical_ttft() -> None:
    """Two candidates tied on TTFT p99: the all-request p50 would put the first ahead (0.18
    against 0.25 s), but its short requests are 4x slower for 10 % faster long ones, so the
    second goes first."""
    first = _ranked(1, 0.431, 0.18, classes={"short": 0.12, "long": 0.27})
    second = _ranked(2, 0.438, 0.25, classes={"short": 0.03, "long": 0.30})

    tie = order([first, second], _scored, target_goodput=0.0)
    assert [r.candidate.chunk_tokens for r in tie] == [2, 1]


def test_ttft_p99s_within_five_percent_rank_by_their_p50() -> None:
    """0.431 and 0.438 s are one tie (the lower p50 first); 0.460 is more than 5 % above the
    tie's lowest and comes after it; a layout on fewer devices is never mixed into a tie."""
    ordered = [
        _ranked(1, 0.431, 0.25), _ranked(2, 0.438, 0.18), _ranked(3, 0.460, 0.10),
        _ranked(4, 0.470, 0.05, devices=3),
    ]  # fmt: skip

    got = order(list(reversed(ordered)), _scored, target_goodput=0.0)
    assert [r.candidate.chunk_tokens for r in got] == [2, 1, 3, 4]
    assert P99_TIE == 0.05


# ---- the ITL bound -----------------------------------------------------------------------

ITL_PROFILE = SimProfile(
    cost_model=CostModel(fixed_overhead_s=0.01, per_token_s=1e-4, per_token_sq_s=0.0),
    hop_s=0.002,
)
ITL_LOAD = BenchConfig(
    workload="synthetic", num_requests=200, request_rate=4.0, concurrency=64,
    input_dist="uniform:100:3000", output_dist="uniform:32:96",
)  # fmt: skip


def _with_routing(base: PdserveConfig, **routing: object) -> PdserveConfig:
    raw = base.model_dump(mode="json")
    raw["router"]["routing"].update(routing)
    return PdserveConfig.model_validate(raw)


def test_a_threshold_whose_local_prefills_break_the_itl_bound_is_not_recommended() -> None:
    """1P1D with the ITL guard off (itl_slo_s null, as before issue 52), on synthetic prompts
    of 100-3,000 tokens: prefilling those under 1,536 tokens on the decode engine gives the
    best TTFT, but their 512-token chunks stretch its streams' steps and the ITL p99 with
    them. With the ITL p99 bound between the two candidates' predictions, the threshold's
    candidate does not meet the target and the one without local prefills is recommended."""
    base = _with_routing(
        LOCAL, itl_slo_s=None, cost_model=ITL_PROFILE.cost_model.model_dump(mode="json")
    )
    points = [Candidate("disaggregated", 1, 1, 512, t) for t in (0, 1536)]
    free = rank(base, ITL_PROFILE, ITL_LOAD, points, target_goodput=0.9)
    local, remote = free
    assert local.candidate.local_prefill_max_cold_tokens == 1536  # the best TTFT p99
    local_itl, remote_itl = local.prediction.metrics.itl_p99_s, remote.prediction.metrics.itl_p99_s
    assert local_itl is not None and remote_itl is not None and local_itl > 1.2 * remote_itl
    bound_s = (local_itl + remote_itl) / 2
    assert not meets_target(local, 0.9, max_itl_p99_s=bound_s)
    assert meets_target(remote, 0.9, max_itl_p99_s=bound_s)
    bounded = order(free, _scored, target_goodput=0.9, max_itl_p99_s=bound_s)
    assert [r.candidate.local_prefill_max_cold_tokens for r in bounded] == [0, 1536]


def test_the_itl_bound_defaults_to_the_config_s_itl_slo() -> None:
    assert LOCAL.router.routing.itl_slo_s == 0.1 and LOCAL.router.stream_batch_interval_ms == 50
    assert itl_bound_s(None, LOCAL) == pytest.approx(0.15)  # the step budget + the interval
    assert itl_bound_s(0.25, LOCAL) == 0.25
    assert itl_bound_s(0.0, LOCAL) is None  # 0: no bound
    assert itl_bound_s(None, _with_routing(LOCAL, itl_slo_s=None)) is None


def _tune_itl(tmp_path: pathlib.Path, itl_slo_s: float, *extra: str) -> tuple[int, str]:
    """`pdserve tune` on ITL_PROFILE's 1P1D candidates (local thresholds 0 and 1536) with a
    base config whose router.routing.itl_slo_s is `itl_slo_s`; (exit code, output)."""
    prof = tmp_path / "profile.json"
    prof.write_text(ITL_PROFILE.model_dump_json())
    config = tmp_path / "base.yaml"
    base = _with_routing(LOCAL, itl_slo_s=itl_slo_s)
    config.write_text(yaml.safe_dump(base.model_dump(mode="json", exclude_defaults=True)))
    result = CliRunner().invoke(
        app,
        [
            "tune", "--profile", str(prof), "--config", str(config), "--devices", "2",
            "--no-aggregated", "--workload", "synthetic", "--num-requests", "100",
            "--request-rate", "4", "--concurrency", "64", "--input-dist", "uniform:100:3000",
            "--chunk-tokens", "512", "--local-thresholds", "0,1536", "--target-goodput", "0.9",
            *extra,
        ],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    return result.exit_code, result.output


def test_tune_holds_candidates_to_the_config_s_itl_slo_and_prints_itl(
    tmp_path: pathlib.Path,
) -> None:
    """The table and the recommendation carry ITL p50/p90/p99 beside TTFT; the bound is the
    base config's itl_slo_s plus its 50 ms stream interval unless --max-itl-p99-s says
    otherwise (0: none). An ITL SLO no candidate can keep (1 ms a step: a decode step alone
    takes longer) is no recommendation."""
    code, out = _tune_itl(tmp_path, 0.5)
    assert code == 0, out
    for col in ("TTFT p90", "ITL p50", "ITL p90", "ITL p99"):
        assert col in out
    assert "ITL p99 <= 0.550 s" in out
    [line] = [x for x in out.splitlines() if x.startswith("recommended:")]
    assert "ITL p50" in line and "p90" in line and "(bound 0.550 s)" in line
    code, out = _tune_itl(tmp_path, 0.001)
    assert code == 1 and "within the p99 bounds" in out, out
    assert "ITL p99 <= 0.0510 s" in out
    code, out = _tune_itl(tmp_path, 0.001, "--max-itl-p99-s", "0")
    assert code == 0 and "ITL p99 <=" not in out, out
