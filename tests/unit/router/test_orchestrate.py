"""The router's request path without Ray: the real Orchestrator, RouterObserver and Placer
(policy 'pdserve') over a scripted Dispatcher. Asserts the decision, the messages each pool
receives, the timeline stages and the metric samples a user would see."""

from __future__ import annotations

import math

import pytest

from pdserve.router.errors import OpenAIError
from tests.unit.router.fakes import (
    BLOCK_TOKENS,
    PREFILL_TIMES,
    FakeDispatcher,
    chunks_of,
)
from tests.unit.router.rig import LONG, SHORT, Rig, drain, prepared, rig


async def test_remote_prefill_sends_each_pool_its_message_and_observes_everything() -> None:
    r = rig()
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG), obs, None)
    got = await drain(gen.chunks)
    obs.ended(200)

    decision = obs.decision
    assert decision is not None and decision.prefill_replica_id == "p0"
    assert decision.decode_replica_id == "d0"
    [pre] = r.dispatcher.prefills
    assert pre.request_id == "req-1-abcd-p" and pre.target_replica_id == "p0"
    assert pre.priority == decision.engine_priority and len(pre.prompt_token_ids) == LONG
    [dec] = r.dispatcher.decodes
    assert dec.request_id == "req-1-abcd-d" and dec.target_replica_id == "d0"
    assert dec.handoff is not None and dec.handoff.num_blocks == LONG // BLOCK_TOKENS
    assert dec.batch_interval_s == math.inf  # not streaming: first token, then the rest
    assert [c.text for c in got] == [" a", " b", " c"]
    assert (gen.num_prompt_tokens, obs.num_cached_tokens) == (LONG, 3)

    stages = obs.timeline.stages()
    assert list(stages) == [
        "router_queue", "prefill_queue", "prefill", "prefill_hops",
        "kv_transfer", "decode_first_token", "decode_hops", "decode",
    ]  # fmt: skip
    assert stages["prefill_queue"] == 0.25 and stages["prefill"] == 0.75
    assert stages["kv_transfer"] == 0.5 and stages["decode_first_token"] == 0.25
    assert obs.failure_point is None

    assert r.sample("pdserve_requests_total", endpoint="completion",
                    decision="remote_prefill", status="200") == 1  # fmt: skip
    assert r.sample("pdserve_kv_transfers_total") == 1
    # A completion prompt is one part; the first 3 tokens came from the prefill's cache.
    assert r.sample("pdserve_prompt_tokens_total", part="prompt", cached="true") == 3
    assert r.sample("pdserve_prompt_tokens_total", part="prompt", cached="false") == LONG - 3
    assert r.sample("pdserve_cached_prompt_tokens_total") == 3
    assert r.sample("pdserve_generation_tokens_total") == 3
    ttft = r.sample("pdserve_time_to_first_token_seconds_count",
                    input_bucket="256-1k", decision="remote_prefill")  # fmt: skip
    assert ttft == 1
    assert r.sample("pdserve_kv_wait_seconds_count") == 1  # the decode engine waited for KV
    assert r.placer is not None and r.placer.queued_prefill_tokens("prefill") == 0


async def test_local_prefill_sends_only_a_decode_request_and_frees_it_at_first_token() -> None:
    r = rig(local_prefill_max_cold_tokens=64)
    r.dispatcher.chunks = chunks_of([" x", " y"], cached=5)
    obs = r.start()
    gen = await r.orchestrator.run(prepared(SHORT, stream=True), obs, None)
    assert obs.decision is not None and obs.decision.prefill_is_local
    assert obs.num_cached_tokens is None  # known only from the decode engine's first chunk
    assert r.placer is not None and r.placer.queued_prefill_tokens("decode") == SHORT

    first = await anext(gen.chunks)
    assert obs.num_cached_tokens == 5
    assert r.placer.queued_prefill_tokens("decode") == 0  # the local prefill is done
    rest = await drain(gen.chunks)
    obs.ended(200)

    assert r.dispatcher.prefills == []
    [dec] = r.dispatcher.decodes
    assert dec.handoff is None and dec.target_replica_id == "d0"
    assert dec.batch_interval_s == 0.05  # streaming: router.stream_batch_interval_ms
    assert [first.text] + [c.text for c in rest] == [" x", " y"]
    assert obs.timeline.local_prefill and "prefill" not in obs.timeline.stages()
    assert r.sample("pdserve_kv_transfers_total") == 0
    assert r.sample("pdserve_cached_prompt_tokens_total") == 5
    assert r.sample("pdserve_requests_total", endpoint="completion",
                    decision="local_prefill", status="200") == 1  # fmt: skip


async def test_closing_the_stream_early_aborts_decode_and_skips_latency_metrics() -> None:
    r = rig()
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG, stream=True), obs, None)
    await anext(gen.chunks)
    await gen.chunks.aclose()  # the client went away
    obs.ended(499)

    assert r.dispatcher.aborted == ["req-1-abcd-d"] and r.dispatcher.completed == []
    assert r.sample("pdserve_e2e_latency_seconds_count",
                    input_bucket="256-1k", decision="remote_prefill") == 0  # fmt: skip
    assert r.sample("pdserve_requests_total", endpoint="completion",
                    decision="remote_prefill", status="499") == 1  # fmt: skip
    assert r.placer is not None and r.placer.queued_prefill_tokens("prefill") == 0


async def test_cancelling_a_local_prefill_before_its_first_token_frees_the_placer() -> None:
    r = rig(local_prefill_max_cold_tokens=64)
    obs = r.start()
    gen = await r.orchestrator.run(prepared(SHORT, stream=True), obs, None)
    assert r.placer is not None and r.placer.queued_prefill_tokens("decode") == SHORT
    await gen.chunks.aclose()  # never iterated: nothing was sent
    obs.ended(499)
    assert r.placer.queued_prefill_tokens("decode") == 0
    assert r.dispatcher.decodes == []


async def test_prefill_failure_sends_no_decode_and_counts_the_request_as_undecided() -> None:
    r = rig()
    r.dispatcher.prefill_error = RuntimeError("prefill replica died")
    obs = r.start()
    with pytest.raises(RuntimeError, match="prefill replica died"):
        await r.orchestrator.run(prepared(LONG), obs, None)
    obs.ended(500)
    assert obs.failure_point == "prefill"
    assert r.dispatcher.decodes == []
    assert r.placer is not None and r.placer.queued_prefill_tokens("prefill") == 0
    assert r.sample("pdserve_requests_total", endpoint="completion",
                    decision="none", status="500") == 1  # fmt: skip


@pytest.mark.parametrize(
    ("fail_at", "point", "delivered"),
    [(0, "decode_before_first_token", 0), (2, "decode_after_first_token", 2)],
)
async def test_decode_failure_is_raised_from_the_stream_at_its_point(
    fail_at: int, point: str, delivered: int
) -> None:
    r = rig(local_prefill_max_cold_tokens=64)
    r.dispatcher.decode_fail_at = fail_at
    obs = r.start()
    gen = await r.orchestrator.run(prepared(SHORT, stream=True), obs, None)
    got = []
    with pytest.raises(RuntimeError, match="decode engine failed"):
        async for chunk in gen.chunks:
            got.append(chunk)
    obs.ended(500)
    assert len(got) == delivered and obs.failure_point == point
    assert r.placer is not None and r.placer.queued_prefill_tokens("decode") == 0
    assert r.sample("pdserve_time_to_first_token_seconds_count",
                    input_bucket="0-256", decision="local_prefill") == 0  # fmt: skip
    assert r.sample("pdserve_requests_total", endpoint="completion",
                    decision="local_prefill", status="500") == 1  # fmt: skip


async def test_no_healthy_decode_replica_is_a_503_before_anything_is_sent() -> None:
    r = rig(decode_healthy=False)
    obs = r.start()
    with pytest.raises(OpenAIError) as err:
        await r.orchestrator.run(prepared(LONG), obs, None)
    assert err.value.status == 503 and err.value.code == "no_replica"
    assert obs.failure_point == "placement"
    assert r.dispatcher.prefills == [] and r.dispatcher.decodes == []


async def test_without_a_placer_ray_serve_places_by_load() -> None:
    r = Rig(FakeDispatcher(), None)
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG), obs, None)
    await drain(gen.chunks)
    obs.ended(200)
    assert obs.decision is None
    assert r.dispatcher.prefills[0].target_replica_id is None
    assert r.dispatcher.decodes[0].target_replica_id is None
    assert obs.timeline.prefill_engine == PREFILL_TIMES


async def test_a_request_is_counted_once_however_often_it_is_ended() -> None:
    r = rig()
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG), obs, None)
    await drain(gen.chunks)
    obs.ended(200)
    obs.ended(500)
    total = sum(
        r.sample("pdserve_requests_total", endpoint="completion", decision=d, status=s)
        for d in ("remote_prefill", "none")
        for s in ("200", "500")
    )
    assert total == 1


# ---- prefill fallback (router.fallback.prefill) -----------------------------------------
