"""Per-request timeline stages and KV size arithmetic (pure)."""

from __future__ import annotations

import pytest

from pdserve.messages import EngineTimes
from pdserve.router.timeline import STAGES, Timeline
from tests.integration.kv_size import kv_bytes_per_token


def _full(local: bool = False) -> Timeline:
    # Router clock: 100.0 arrival ... 101.0 last token. Engines use unrelated clocks.
    t = Timeline(arrival_s=100.0, local_prefill=local)
    t.prefill_dispatched_s = 100.01
    if not local:
        t.prefill_returned_s = 100.31
        t.prefill_engine = EngineTimes(queued_s=5.0, scheduled_s=5.05, first_token_s=5.25)
    t.decode_engine = EngineTimes(queued_s=9.0, scheduled_s=9.04, first_token_s=9.06)
    t.first_token_s = 100.45
    t.last_token_s = 101.0
    t.deliveries = [(100.45, 1), (100.5, 1), (100.7, 1), (101.0, 1)]
    return t


def test_stages_cover_the_path_and_add_up_to_e2e() -> None:
    t = _full()
    stages = t.stages()
    assert list(stages) == list(STAGES)
    assert all(v >= 0 for v in stages.values())
    assert stages["prefill_queue"] == pytest.approx(0.05)
    assert stages["prefill"] == pytest.approx(0.2)
    assert stages["prefill_hops"] == pytest.approx(0.05)
    assert stages["kv_transfer"] == pytest.approx(0.04)
    assert stages["decode_hops"] == pytest.approx(0.14 - 0.06)
    assert sum(stages.values()) == pytest.approx(t.e2e_s(), rel=1e-4)
    assert t.ttft_s() == pytest.approx(0.45)
    assert t.inter_token_s() == pytest.approx([0.05, 0.2, 0.3])


def test_inter_token_latency_splits_a_batched_chunk_over_its_tokens() -> None:
    t = Timeline(arrival_s=0.0)
    t.deliveries = [(1.0, 1), (1.2, 4), (1.3, 0), (1.5, 2)]
    # 0.2 s over 4 tokens; an empty chunk (e.g. the finish) adds no token; 0.2 s over 2.
    assert t.inter_token_s() == pytest.approx([0.05] * 4 + [0.1] * 2)


def test_local_prefill_has_no_prefill_round_trip() -> None:
    t = _full(local=True)
    stages = t.stages()
    assert "prefill" not in stages and "kv_transfer" in stages
    assert sum(stages.values()) == pytest.approx(t.e2e_s(), rel=1e-4)


def test_partial_timeline_reports_only_reached_stages() -> None:
    t = Timeline(arrival_s=1.0)
    assert t.stages() == {}
    t.prefill_dispatched_s = 1.5
    assert t.stages() == {"router_queue": 0.5}
    assert t.ttft_s() is None and t.e2e_s() is None


@pytest.mark.parametrize(
    ("config", "dtype", "expected"),
    [
        # the demo model: 2 layers x 2 KV heads x head_dim 32 x K,V x fp32
        (
            {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 32, "hidden_size": 128, "torch_dtype": "float32"},
            "auto",
            1024,
        ),
        # Llama-3-8B-like in bf16: 32 x 8 x 128 x 2 x 2
        (
            {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "hidden_size": 4096, "torch_dtype": "bfloat16"},
            "auto",
            131072,
        ),
        ({"num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 8}, "float16", 32),
    ],
)  # fmt: skip
def test_kv_bytes_per_token(config: dict[str, object], dtype: str, expected: int) -> None:
    assert kv_bytes_per_token(config, dtype) == expected


def test_kv_bytes_rejects_unknown_dtype() -> None:
    with pytest.raises(ValueError, match="unknown KV dtype"):
        kv_bytes_per_token(
            {"num_hidden_layers": 1, "num_attention_heads": 1, "hidden_size": 2}, "q4"
        )
