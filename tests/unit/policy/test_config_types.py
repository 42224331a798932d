"""PolicyConfig validation and the frozen data's own checks."""

from __future__ import annotations

from typing import Any, cast

import pytest
from pydantic import ValidationError

from pdserve.router.policy import PolicyConfig, ReplicaSnapshot, RequestSummary, ScorerWeights


def test_defaults_match_the_design() -> None:
    cfg = PolicyConfig()
    assert cfg.prefill_weights == ScorerWeights(
        predicted_ttft=1.0,
        prefix_overlap=0.0,
        outstanding_prefill=0.0,
        running_requests=0.0,
        kv_usage=0.1,
    )
    assert cfg.decode_weights.predicted_ttft == 0.0
    assert (cfg.spill_min_gain_s, cfg.spill_max_decode_prefill_s) == (0.25, 0.5)
    assert cfg.local_prefill_max_uncached_tokens == 256
    assert all(f.description for f in PolicyConfig.model_fields.values())
    assert all(f.description for f in ScorerWeights.model_fields.values())


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"polcy": "pdserve"}, "polcy"),
        ({"policy": "round_robin"}, "policy"),  # named once, at router.policy
        ({"prefill_weights": {"prefix_overlap": -1}}, "prefix_overlap"),
        ({"prefill_weights": {"cache": 1.0}}, "cache"),
        (
            {
                "decode_weights": {
                    "predicted_ttft": 0,
                    "prefix_overlap": 0,
                    "outstanding_prefill": 0,
                    "running_requests": 0,
                    "kv_usage": 0,
                }
            },
            "at least one scorer weight",
        ),
        ({"max_kv_cache_usage": 1.5}, "max_kv_cache_usage"),
        ({"local_prefill_max_uncached_tokens": -1}, "local_prefill_max_uncached_tokens"),
        ({"priority_bucket_base_s": 0}, "priority_bucket_base_s"),
        ({"max_priority_levels": 0}, "max_priority_levels"),
        ({"block_size_tokens": 0}, "block_size_tokens"),
        ({"cost_model": {"per_token_s": -1}}, "per_token_s"),
    ],
)
def test_bad_config_names_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        PolicyConfig.model_validate(data)


def test_config_is_frozen() -> None:
    with pytest.raises(ValidationError):
        cast(Any, PolicyConfig()).lanes = False


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("r0", "prefill", 0, 0, 1.2, 0), "kv_cache_usage"),
        (("r0", "prefill", -1, 0, 0.2, 0), "counts"),
        (("r0", "both", 0, 0, 0.2, 0), "pool"),
    ],
)
def test_snapshot_validation(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ReplicaSnapshot(*args)


def test_request_summary_validation() -> None:
    with pytest.raises(ValueError, match="num_prompt_tokens"):
        RequestSummary("r", -1, (), 0, 0.0)
