"""The router's fallbacks without Ray: a failed or timed-out prefill retried elsewhere or
prefilled on decode, a decode retried before its first token, stranded KV released. The real
Orchestrator, RouterObserver and Placer over a scripted Dispatcher (see rig.py)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from pdserve.router.placement import Placer
from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.replica_view import ReplicaView
from tests.unit.router.fakes import (
    BLOCK_TOKENS,
    FakeDispatcher,
    FixedSource,
    placer,
)
from tests.unit.router.rig import LONG, Rig, drain, prepared, rig


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
