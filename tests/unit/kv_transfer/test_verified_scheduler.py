"""The verified connector's scheduler half, with vLLM's request and cache manager faked: what
the producer adds to a handoff and when, and what the consumer refuses before it pulls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pdserve.kv_transfer.integrity import (
    EXPECT_KEY,
    INTEGRITY_KEY,
    VERIFY_KEY,
    HandoffIntegrity,
    prompt_sha256,
)
from pdserve.kv_transfer.verified_scheduler import IntegrityScheduler
from pdserve.kv_transfer.verified_stats import CHECKS_KEY, FAILED_KEY, IntegrityCounts

NOW = 5000.0
LEASE = 30.0


@dataclass
class Request:
    request_id: str
    prompt_token_ids: list[int]
    kv_transfer_params: dict[str, Any] | None
    num_computed_tokens: int = 0

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


@dataclass
class Blocks:
    ids: dict[str, list[int]] = field(default_factory=dict)

    def get_block_ids(self, req_id: str) -> tuple[list[int], ...]:
        return (self.ids[req_id],)


def scheduler(counts: IntegrityCounts | None = None, tp: int = 1) -> IntegrityScheduler:
    s = IntegrityScheduler(
        model="m", lease_s=LEASE, tp_rank_count=tp, counts=counts or IntegrityCounts(),
        clock_unix_s=lambda: NOW,
    )  # fmt: skip
    return s


def produced(verify: bool = True) -> tuple[IntegrityScheduler, Request, Blocks]:
    s, blocks = scheduler(), Blocks({"r-p-0123abcd": [4, 5, 6]})
    s.bind(blocks)
    req = Request(
        "r-p-0123abcd", list(range(300)), {"do_remote_decode": True, VERIFY_KEY: verify}
    )  # fmt: skip
    s.track(req)
    return s, req, blocks


def handoff(blocks: list[int]) -> dict[str, Any]:
    return {"do_remote_prefill": True, "remote_block_ids": [blocks], "remote_request_id": "x"}


def test_the_producer_digests_at_the_last_chunk_and_fills_the_handoff_in_the_same_step() -> None:
    s, req, _ = produced()
    # First chunk of 256 tokens: the prompt is not done.
    assert s.blocks_to_digest({"r-p-0123abcd": 256}) == {}
    req.num_computed_tokens = 256
    assert s.blocks_to_digest({"r-p-0123abcd": 44}) == {"r-p-0123abcd": [4, 5, 6]}
    params = handoff([4, 5, 6])
    s.on_finished(req, params)
    rec = HandoffIntegrity.from_wire(params[INTEGRITY_KEY])
    assert rec is not None and rec.digests == ()
    assert rec.request_id == "r-p" and rec.model == "m" and rec.num_prompt_tokens == 300
    assert rec.prompt_sha256 == prompt_sha256(range(300))
    assert rec.lease_expires_unix_s == NOW + LEASE
    s.on_worker_digests({"r-p-0123abcd": {0: ([4, 5, 6], [7, 8, 9])}})
    assert params[INTEGRITY_KEY]["digests"] == [[7, 8, 9]]


def test_digests_of_other_blocks_are_not_attached() -> None:
    s, req, _ = produced()
    s.blocks_to_digest({"r-p-0123abcd": 300})
    params = handoff([4, 5, 6])
    s.on_finished(req, params)
    s.on_worker_digests({"r-p-0123abcd": {0: ([4, 5, 99], [7, 8, 9])}})
    assert params[INTEGRITY_KEY]["digests"] == [[]]  # the decode engine: unverifiable


def test_missing_digests_from_a_tensor_parallel_rank_leave_none() -> None:
    s = scheduler(tp=2)
    s.bind(Blocks({"a": [1]}))
    req = Request("a", [1, 2], {"do_remote_decode": True, VERIFY_KEY: True})
    s.track(req)
    s.blocks_to_digest({"a": 2})
    params = handoff([1])
    s.on_finished(req, params)
    s.on_worker_digests({"a": {0: ([1], [5])}})
    assert params[INTEGRITY_KEY]["digests"] == []


def test_an_unverified_prefill_gets_no_record() -> None:
    s, req, _ = produced(verify=False)
    assert s.blocks_to_digest({"r-p-0123abcd": 300}) == {}
    params = handoff([4, 5, 6])
    s.on_finished(req, params)
    assert INTEGRITY_KEY not in params


def test_with_a_fault_file_every_prompt_goes_to_the_worker_but_only_verified_ones_get_records() -> (
    None
):
    s = IntegrityScheduler(
        model="m", lease_s=LEASE, tp_rank_count=1, counts=IntegrityCounts(), track_all=True
    )
    s.bind(Blocks({"a": [1, 2]}))
    req = Request("a", [1, 2, 3], {"do_remote_decode": True, VERIFY_KEY: False})
    s.track(req)
    assert s.blocks_to_digest({"a": 3}) == {"a": [1, 2]}
    params = handoff([1, 2])
    s.on_finished(req, params)
    assert INTEGRITY_KEY not in params


def arriving(params: dict[str, Any], prompt: list[int]) -> Request:
    return Request("d-0123abcd", prompt, params)


def good_params(prompt: list[int], expires: float = NOW + 10) -> dict[str, Any]:
    rec = HandoffIntegrity(
        "r-p-0123abcd", prompt_sha256(prompt), len(prompt), "m", expires, ((1, 2),)
    )
    return {
        "do_remote_prefill": True, "remote_block_ids": [[3, 4]],
        "remote_request_id": "r-p-0123abcd", VERIFY_KEY: True, EXPECT_KEY: "r-p",
        INTEGRITY_KEY: rec.to_wire(),
    }  # fmt: skip


def test_the_consumer_lets_a_good_handoff_through_and_counts_the_check() -> None:
    counts = IntegrityCounts()
    s = scheduler(counts)
    req = arriving(good_params([1, 2, 3]), [1, 2, 3])
    s.check_arrival(req)
    assert req.kv_transfer_params is not None and req.kv_transfer_params["do_remote_prefill"]
    assert counts.take() == {CHECKS_KEY: [1], FAILED_KEY: []}


def test_the_consumer_strips_a_foreign_or_late_handoff_so_the_engine_prefills_itself() -> None:
    counts = IntegrityCounts()
    s = scheduler(counts)
    foreign = arriving(good_params([1, 2, 3]), [1, 2, 4])
    late = arriving(good_params([1, 2, 3], expires=NOW), [1, 2, 3])
    for req in (foreign, late):
        s.check_arrival(req)
        assert req.kv_transfer_params is not None
        assert req.kv_transfer_params["do_remote_prefill"] is False
        assert req.kv_transfer_params["remote_block_ids"] is None
    assert counts.take() == {CHECKS_KEY: [1, 1], FAILED_KEY: [["d", "identity"], ["d", "stale"]]}


def test_with_other_tp_sizes_identity_and_lease_are_checked_but_not_digests() -> None:
    counts = IntegrityCounts()
    s = scheduler(counts)
    params = good_params([1, 2])
    params["tp_size"] = 2  # the prefill engine's; this decode engine has 1
    params[INTEGRITY_KEY]["digests"] = [[], []]
    s.check_arrival(arriving(params, [1, 2]))
    assert params["do_remote_prefill"] is True
    assert s.expectations({"a": (arriving(params, [1, 2]), ([5],), (), True)}) == {}
    s.check_arrival(arriving(good_params([1, 2], expires=NOW), [1, 2]))
    assert counts.take()[FAILED_KEY] == [["d", "stale"]]


def test_an_unverified_decode_is_not_checked() -> None:
    counts = IntegrityCounts()
    s = scheduler(counts)
    params = good_params([1])
    params[VERIFY_KEY] = False
    s.check_arrival(arriving(params, [9]))
    assert counts.empty()


def test_expectations_carry_the_record_of_verified_pulls_only() -> None:
    verified = arriving(good_params([1]), [1])
    plain = arriving({**good_params([1]), VERIFY_KEY: False}, [1])
    need_recv = {"a": (verified, ([5, 6],), (), True), "b": (plain, ([7],), (), True),
                 "c": (verified, ([],), (), False)}  # fmt: skip
    got = scheduler().expectations(need_recv)
    assert list(got) == ["a"] and got["a"] == verified.kv_transfer_params[INTEGRITY_KEY]  # type: ignore[index]
