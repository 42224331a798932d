"""The router's request path without Ray: the real Orchestrator, RouterObserver and Placer
(policy 'pdserve') over a scripted Dispatcher. Asserts the decision, the messages each pool
receives, the timeline stages and the metric samples a user would see."""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any

import pytest

from pdserve.config import RouterConfig
from pdserve.messages import SamplingOptions
from pdserve.router.errors import OpenAIError
from pdserve.router.metrics import RouterMetrics
from pdserve.router.observe import RequestObservation, RouterObserver
from pdserve.router.orchestrate import Orchestrator
from pdserve.router.placement import Placer
from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.prepare import PreparedRequest
from pdserve.router.replica_view import ReplicaView
from tests.unit.router.fakes import (
    BLOCK_TOKENS,
    PREFILL_TIMES,
    FakeDispatcher,
    FixedSource,
    StepClock,
    chunks_of,
    placer,
)

LONG = 40 * BLOCK_TOKENS  # 640 tokens: remote prefill
SHORT = 20  # under local_prefill_max_cold_tokens=64 below: local prefill


def prepared(num_tokens: int, *, stream: bool = False, rid: str = "req-1") -> PreparedRequest:
    return PreparedRequest(
        request_id=rid,
        engine_request_id=f"{rid}-abcd",
        prompt_token_ids=[(7 * i) % 1000 for i in range(num_tokens)],
        sampling=SamplingOptions(max_tokens=3, temperature=0.0),
        priority=0,
        stream=stream,
    )


class Rig:
    """One router replica's request path, wired like router/deployment.py does."""

    def __init__(
        self,
        dispatcher: FakeDispatcher,
        the_placer: Placer | None,
        fallback: str = "fail",
        decode_fallback: str = "retry",
    ):
        self.dispatcher = dispatcher
        self.placer = the_placer
        self.metrics = RouterMetrics()
        self.observer = RouterObserver(
            self.metrics, the_placer, kv_bytes_per_token=100, clock=StepClock()
        )
        config = RouterConfig.model_validate(
            {
                "stream_batch_interval_ms": 50,
                "fallback": {"prefill": fallback, "decode": decode_fallback},
            }
        )
        self.orchestrator = Orchestrator(config, dispatcher, the_placer, clock=StepClock())

    def start(self, rid: str = "req-1") -> RequestObservation:
        return self.observer.start("completion", rid, f"{rid}-abcd", arrival_s=9.0)

    def sample(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


def rig(fallback: str = "fail", **placer_args: Any) -> Rig:
    return Rig(FakeDispatcher(), placer(**placer_args), fallback)


async def drain(chunks: Any) -> list[Any]:
    return [c async for c in chunks]


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
    assert r.sample("pdserve_prompt_tokens_total") == LONG
    assert r.sample("pdserve_cached_prompt_tokens_total") == 3
    assert r.sample("pdserve_generation_tokens_total") == 3
    ttft = r.sample("pdserve_time_to_first_token_seconds_count",
                    input_bucket="256-1k", decision="remote_prefill")  # fmt: skip
    assert ttft == 1
    assert r.sample("pdserve_kv_transfer_bytes_sum") == LONG * 100  # 40 blocks x 16 x 100 B
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


async def test_a_failed_prefill_is_retried_on_another_prefill_replica() -> None:
    r = Rig(
        FakeDispatcher(prefill_fails_on=frozenset({"p0"})),
        placer(prefill_replicas=("p0", "p1")),
        "retry_then_local",
    )
    obs = r.start()
    # p0 is the policy's choice (tie on load, first id); it fails, p1 serves.
    gen = await r.orchestrator.run(prepared(LONG), obs, None)
    got = await drain(gen.chunks)
    obs.ended(200)
    assert [p.target_replica_id for p in r.dispatcher.prefills] == ["p0", "p1"]
    assert [p.request_id for p in r.dispatcher.prefills] == ["req-1-abcd-p", "req-1-abcd-p2"]
    assert r.dispatcher.decodes[0].handoff is not None  # decode pulls p1's KV
    assert len(got) == 3 and obs.timeline.prefill_replica_id == "p1"
    assert obs.fallbacks == ["prefill failed on p0 (error): retried on p1"]
    assert r.sample("pdserve_fallbacks_total", stage="prefill", reason="error",
                    action="retry") == 1  # fmt: skip
    assert r.sample("pdserve_requests_total", endpoint="completion",
                    decision="remote_prefill", status="200") == 1  # fmt: skip
    assert r.placer is not None and r.placer.queued_prefill_tokens("prefill") == 0


async def test_with_no_other_prefill_replica_the_decode_replica_prefills() -> None:
    r = Rig(FakeDispatcher(prefill_fails_on=frozenset({"p0"})), placer(), "retry_then_local")
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG), obs, None)
    got = await drain(gen.chunks)
    obs.ended(200)
    assert len(r.dispatcher.prefills) == 1
    decode = r.dispatcher.decodes[0]
    assert decode.handoff is None and decode.target_replica_id == "d0"  # local prefill
    assert len(got) == 3 and obs.timeline.local_prefill
    assert obs.fallbacks == ["prefill failed on p0 (error): prefilled on decode d0"]
    assert r.sample("pdserve_fallbacks_total", stage="prefill", reason="error",
                    action="local") == 1  # fmt: skip
    assert r.sample("pdserve_requests_total", endpoint="completion",
                    decision="local_prefill", status="200") == 1  # fmt: skip
    assert r.placer is not None and r.placer.queued_prefill_tokens("decode") == 0


async def test_retry_then_local_when_both_prefill_replicas_fail() -> None:
    r = Rig(
        FakeDispatcher(prefill_fails_on=frozenset({"p0", "p1"})),
        placer(prefill_replicas=("p0", "p1")),
        "retry_then_local",
    )
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG), obs, None)
    await drain(gen.chunks)
    obs.ended(200)
    assert obs.fallbacks == [
        "prefill failed on p0 (error): retried on p1",
        "prefill failed on p1 (error): prefilled on decode d0",
    ]
    assert r.dispatcher.decodes[0].handoff is None


@pytest.mark.parametrize(
    ("fallback", "replicas", "num_prefills"),
    [("retry", ("p0",), 1), ("retry", ("p0", "p1"), 2), ("fail", ("p0", "p1"), 1)],
)
async def test_without_local_fallback_the_prefill_error_is_raised(
    fallback: str, replicas: tuple[str, ...], num_prefills: int
) -> None:
    r = Rig(
        FakeDispatcher(prefill_fails_on=frozenset(replicas)), placer(prefill_replicas=replicas),
        fallback,
    )  # fmt: skip
    obs = r.start()
    with pytest.raises(RuntimeError, match="died"):
        await r.orchestrator.run(prepared(LONG), obs, None)
    obs.ended(500)
    assert r.dispatcher.decodes == [] and obs.failure_point == "prefill"
    assert len(r.dispatcher.prefills) == num_prefills


async def test_local_fallback_only_when_configured() -> None:
    r = Rig(FakeDispatcher(prefill_fails_on=frozenset({"p0"})), placer(), "local")
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG), obs, None)
    await drain(gen.chunks)
    obs.ended(200)
    assert len(r.dispatcher.prefills) == 1  # no retry with `local`
    assert obs.fallbacks == ["prefill failed on p0 (error): prefilled on decode d0"]


# ---- stranded KV: a handoff whose decode produced nothing is released ----------------------


@pytest.mark.parametrize(
    ("fail_at", "local", "released"),
    [
        (0, False, ["req-p"]),  # decode failed before its first token: free the prefill KV
        (2, False, []),  # the engine pulled the KV and started: nothing stranded
        (None, False, []),
        (0, True, []),  # local prefill: no handoff to release
    ],
)
async def test_a_decode_that_produced_nothing_releases_its_handoff(
    fail_at: int | None, local: bool, released: list[str]
) -> None:
    r = rig(local_prefill_max_cold_tokens=1000 if local else 0)
    r.dispatcher.decode_fail_at = fail_at
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG), obs, None)
    with contextlib.suppress(RuntimeError):
        await drain(gen.chunks)
    await asyncio.sleep(0.01)  # the release is sent in the background
    assert r.dispatcher.released == released


async def test_a_client_gone_before_the_first_token_releases_the_handoff() -> None:
    r = rig()
    r.dispatcher.chunk_delay_s = 10.0  # decode has not answered yet
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG), obs, None)
    first = asyncio.ensure_future(anext(gen.chunks))
    await asyncio.sleep(0.01)
    first.cancel()  # the HTTP layer cancels when the client disconnects
    with contextlib.suppress(asyncio.CancelledError):
        await first
    await gen.chunks.aclose()
    await asyncio.sleep(0.01)
    assert r.dispatcher.released == ["req-p"]
    assert r.dispatcher.aborted == ["req-1-abcd-d"]


# ---- decode fallback (router.fallback.decode) --------------------------------------------


def two_decode_rig(decode_fallback: str = "retry", **dispatcher_args: Any) -> Rig:
    return Rig(
        FakeDispatcher(**dispatcher_args),
        placer(decode_replicas=("d0", "d1")),
        decode_fallback=decode_fallback,
    )


async def test_a_decode_failing_before_its_first_token_is_retried_on_another_replica() -> None:
    r = two_decode_rig(decode_fails_on=frozenset({"d0"}))
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG, stream=True), obs, None)
    first = await anext(gen.chunks)
    assert r.placer is not None
    assert (r.placer.open_streams("d0"), r.placer.open_streams("d1")) == (0, 1)
    rest = await drain(gen.chunks)
    obs.ended(200)

    assert [c.text for c in [first, *rest]] == [" a", " b", " c"]
    failed, retried = r.dispatcher.decodes
    assert (failed.target_replica_id, failed.handoff is not None) == ("d0", True)
    # The retry prefills on d1 itself: the first handoff's KV may be half-read by d0.
    assert (retried.target_replica_id, retried.handoff) == ("d1", None)
    assert retried.request_id != failed.request_id
    assert r.dispatcher.released == [failed.handoff.remote_request_id]  # type: ignore[union-attr]
    assert r.sample("pdserve_fallbacks_total", stage="decode", reason="error",
                    action="retry") == 1  # fmt: skip
    assert obs.fallbacks and "retried on d1" in obs.fallbacks[0]
    assert obs.timeline.local_prefill and obs.num_cached_tokens == first.num_cached_tokens
    assert r.placer.open_streams("d1") == 0
    assert r.sample("pdserve_requests_total", endpoint="completion",
                    decision="local_prefill", status="200") == 1  # fmt: skip


async def test_a_decode_failing_after_its_first_token_is_not_retried() -> None:
    r = two_decode_rig(decode_fail_at=2)
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG, stream=True), obs, None)
    got = []
    with pytest.raises(RuntimeError, match="decode engine failed at chunk 2"):
        async for chunk in gen.chunks:
            got.append(chunk)
    obs.ended(502)
    assert len(got) == 2 and len(r.dispatcher.decodes) == 1
    assert obs.failure_point == "decode_after_first_token" and obs.fallbacks == []


@pytest.mark.parametrize(
    ("decode_fallback", "replicas"), [("fail", ("d0", "d1")), ("retry", ("d0",))]
)
async def test_no_decode_retry_when_off_or_no_other_replica(
    decode_fallback: str, replicas: tuple[str, ...]
) -> None:
    r = Rig(
        FakeDispatcher(decode_fails_on=frozenset({"d0"})),
        placer(decode_replicas=replicas),
        decode_fallback=decode_fallback,
    )
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG, stream=True), obs, None)
    with pytest.raises(RuntimeError, match="decode replica d0 died"):
        await anext(gen.chunks)
    obs.ended(502)
    assert len(r.dispatcher.decodes) == 1
    assert obs.failure_point == "decode_before_first_token"
    assert r.sample("pdserve_fallbacks_total", stage="decode", reason="error",
                    action="retry") == 0  # fmt: skip


async def test_a_client_gone_during_a_decode_retry_aborts_it() -> None:
    r = two_decode_rig(decode_fails_on=frozenset({"d0"}), chunk_delay_s=0.05)
    obs = r.start()
    gen = await r.orchestrator.run(prepared(LONG, stream=True), obs, None)
    await anext(gen.chunks)
    await gen.chunks.aclose()  # the client went away mid-stream on the retried replica
    obs.ended(499)
    assert r.dispatcher.aborted[-1] == r.dispatcher.decodes[1].request_id
    assert r.placer is not None and r.placer.open_streams("d1") == 0


async def test_a_prefill_whose_replica_turns_unhealthy_is_moved_without_its_deadline() -> None:
    prefill = FixedSource(["p0", "p1"])
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    view.attach("prefill", prefill)
    view.attach("decode", FixedSource(["d0"]))
    the_placer = Placer(PolicyConfig(block_size_tokens=BLOCK_TOKENS), view, policy="pdserve")
    r = Rig(FakeDispatcher(prefill_hangs_on=frozenset({"p0"})), the_placer, "retry_then_local")
    obs = r.start()
    run = asyncio.ensure_future(r.orchestrator.run(prepared(LONG), obs, None))
    await asyncio.sleep(0.3)
    assert not run.done()  # p0's engine is frozen: its prefill hangs, p0 still looks healthy
    prefill.replicas()[0][1]["healthy"] = False  # p0's engine stopped answering its pings
    gen = await asyncio.wait_for(run, timeout=2)  # moved within a health poll, not 60 s
    await drain(gen.chunks)
    obs.ended(200)
    assert [p.target_replica_id for p in r.dispatcher.prefills] == ["p0", "p1"]
    assert r.dispatcher.aborted[0] == r.dispatcher.prefills[0].request_id  # p0's call cancelled
    assert r.sample("pdserve_fallbacks_total", stage="prefill", reason="unhealthy",
                    action="retry") == 1  # fmt: skip
