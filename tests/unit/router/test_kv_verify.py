"""Which requests' KV handoffs the engines check (kv_transfer.verify and the per-request
header), what the messages carry for it, and the swap fault hook (no Ray, no engines)."""

from __future__ import annotations

import asyncio
import pathlib
import random
from dataclasses import replace

from pdserve.config import RouterConfig
from pdserve.kv_transfer.faults import FaultSwitch
from pdserve.router.fault_hooks import HandoffSwapper
from pdserve.router.orchestrate import Orchestrator
from tests.unit.router.fakes import chunks_of, handoff
from tests.unit.router.rig import LONG, SHORT, drain, prepared, rig


async def test_by_default_every_remote_prefill_is_checked_and_names_its_prefill() -> None:
    r = rig()
    obs = r.start()
    await drain((await r.orchestrator.run(prepared(LONG), obs, None)).chunks)
    [pre], [dec] = r.dispatcher.prefills, r.dispatcher.decodes
    assert pre.verify_kv and dec.verify_kv
    assert dec.prefill_request_id == pre.request_id
    assert obs.timeline.kv_verified


async def test_the_header_override_turns_the_check_off_for_one_request() -> None:
    r = rig()
    await drain((await r.orchestrator.run(prepared(LONG), r.start(), None, False)).chunks)
    [pre], [dec] = r.dispatcher.prefills, r.dispatcher.decodes
    assert not pre.verify_kv and not dec.verify_kv


async def test_a_local_prefill_has_nothing_to_check() -> None:
    r = rig(local_prefill_max_cold_tokens=64)
    await drain((await r.orchestrator.run(prepared(SHORT), r.start(), None)).chunks)
    [dec] = r.dispatcher.decodes
    assert dec.handoff is None and not dec.verify_kv and dec.prefill_request_id is None


def test_sampling_checks_about_that_share_of_requests_and_the_header_wins() -> None:
    r = rig()
    config = RouterConfig.model_validate({})
    orchestrator = Orchestrator(
        config, r.dispatcher, r.placer, kv_verify_fraction=0.25, rng=random.Random(7)
    )
    checked = sum(orchestrator._verify(None) for _ in range(2000))
    assert 430 <= checked <= 570  # 25 % of 2,000, about 5 standard deviations each side
    assert all(orchestrator._verify(True) for _ in range(50))
    never = Orchestrator(config, r.dispatcher, r.placer, kv_verify_fraction=0.0)
    assert not any(never._verify(None) for _ in range(50))


async def test_a_recomputed_prompt_shows_in_the_timeline() -> None:
    r = rig()
    first, *rest = chunks_of([" a", " b"])
    r.dispatcher.chunks = [replace(first, kv_recomputed="stale"), *rest]
    obs = r.start()
    await drain((await r.orchestrator.run(prepared(LONG), obs, None)).chunks)
    assert obs.timeline.kv_recomputed == "stale"


async def test_the_swap_hook_swaps_two_concurrent_handoffs_only_while_on(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "faults"
    path.write_text("")
    swapper = HandoffSwapper(FaultSwitch(str(path)), pair_wait_s=0.5)
    a, b = handoff(1), handoff(2)
    assert await swapper.exchange(a) is a  # off: untouched, no waiting
    path.write_text("swap_handoffs\n")
    got = await asyncio.gather(swapper.exchange(a), swapper.exchange(b))
    assert got == [b, a]
    assert await swapper.exchange(a) is a  # no partner within pair_wait_s: its own


def test_without_a_fault_file_the_switch_is_never_on(tmp_path: pathlib.Path) -> None:
    assert not FaultSwitch(None).armed and not FaultSwitch(None).on("corrupt_kv")
    assert not FaultSwitch(str(tmp_path / "missing")).on("corrupt_kv")
