"""The handoff's integrity record and the decode engine's checks on it (pure)."""

from __future__ import annotations

import pytest

from pdserve.kv_transfer.integrity import (
    STALE_MARGIN_S,
    HandoffIntegrity,
    bad_blocks,
    identity_failure,
    prompt_sha256,
    same_request,
)

PROMPT = list(range(300))


def record(**changes: object) -> HandoffIntegrity:
    base = HandoffIntegrity(
        request_id="r1-p-0123abcd",
        prompt_sha256=prompt_sha256(PROMPT),
        num_prompt_tokens=len(PROMPT),
        model="m",
        lease_expires_unix_s=1000.0,
        digests=((1, 2, 3),),
    )
    fields = {f: getattr(base, f) for f in HandoffIntegrity.__slots__}  # type: ignore[attr-defined]
    fields.update(changes)
    return HandoffIntegrity(**fields)  # type: ignore[arg-type]


def check(rec: HandoffIntegrity | None, **kw: object) -> str | None:
    args: dict[str, object] = {
        "expected_request_id": "r1-p",
        "prompt_token_ids": PROMPT,
        "model": "m",
        "num_remote_blocks": 3,
        "tp_rank": 0,
        "now_unix_s": 900.0,
    }
    args.update(kw)
    return identity_failure(rec, **args)  # type: ignore[arg-type]


def test_the_wire_form_round_trips_and_bad_forms_are_none() -> None:
    rec = record()
    assert HandoffIntegrity.from_wire(rec.to_wire()) == rec
    assert HandoffIntegrity.from_wire(None) is None
    assert HandoffIntegrity.from_wire({**rec.to_wire(), "v": 99}) is None
    broken = rec.to_wire()
    del broken["prompt_sha256"]
    assert HandoffIntegrity.from_wire(broken) is None


def test_prompt_hash_depends_on_every_token_and_their_order() -> None:
    assert prompt_sha256([1, 2, 3]) != prompt_sha256([1, 2, 4])
    assert prompt_sha256([1, 2, 3]) != prompt_sha256([3, 2, 1])
    assert prompt_sha256([1, 2]) != prompt_sha256([1, 2, 0])


def test_request_ids_match_with_or_without_vllms_suffix() -> None:
    assert same_request("r1-p", "r1-p")
    assert same_request("r1-p", "r1-p-0123abcd")
    assert not same_request("r1-p", "r2-p-0123abcd")
    assert not same_request("r1-p", "r1-p-01")  # not vLLM's 8-character suffix


def test_a_matching_handoff_inside_its_lease_passes() -> None:
    assert check(record()) is None


@pytest.mark.parametrize(
    ("rec", "kw", "reason"),
    [
        (None, {}, "unverifiable"),
        (record(model="other"), {}, "identity"),
        (record(), {"prompt_token_ids": [*PROMPT[:-1], 7]}, "identity"),
        (record(), {"prompt_token_ids": PROMPT[:-1]}, "identity"),
        (record(), {"expected_request_id": "r2-p"}, "identity"),
        (record(digests=()), {}, "unverifiable"),
        (record(digests=((1, 2),)), {}, "unverifiable"),
        (record(), {"tp_rank": 1}, "unverifiable"),
        (record(), {"now_unix_s": 1000.0 - STALE_MARGIN_S + 0.01}, "stale"),
    ],
)
def test_a_handoff_that_does_not_belong_or_has_expired_is_refused(
    rec: HandoffIntegrity | None, kw: dict[str, object], reason: str
) -> None:
    assert check(rec, **kw) == reason


def test_digests_are_not_required_when_they_cannot_be_compared() -> None:
    assert check(record(digests=()), digests_comparable=False) is None
    assert check(record(model="x"), digests_comparable=False) == "identity"


def test_without_an_expected_id_the_prompt_hash_still_binds_the_handoff() -> None:
    assert check(record(), expected_request_id=None) is None
    assert check(record(), expected_request_id=None, prompt_token_ids=PROMPT[::-1]) == "identity"


def test_bad_blocks_compares_the_pulled_tail() -> None:
    expected = [10, 11, 12, 13]
    # The decode engine held the first block itself and pulled the last three.
    assert bad_blocks(expected, [7, 8, 9], [11, 12, 13]) == []
    assert bad_blocks(expected, [7, 8, 9], [11, 99, 13]) == [8]
    assert bad_blocks(expected, [7, 8, 9], [12, 11, 13]) == [7, 8]  # swapped blocks
    assert bad_blocks(expected, [1, 2, 3, 4, 5], [10, 11, 12, 13, 14]) == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="one digest per local block"):
        bad_blocks(expected, [1], [])
