"""Fault-run verdicts and the reliability-table row (pure)."""

from __future__ import annotations

import pytest

from pdserve.bench.faults import Outcome, markdown_table, summarize, verdict


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (Outcome(0, 1, 200, True), "succeeded"),
        (Outcome(0, 1, 200, True, fallbacks=1), "fell_back"),
        (Outcome(0, 1, 200, False, "decode_failed"), "failed_cleanly"),  # error event mid-stream
        (Outcome(0, 1, 502, False, "decode_failed"), "failed_cleanly"),
        (Outcome(0, 1, 503, False, "no_replica"), "failed_cleanly"),
        (Outcome(0, 1, 500, False, "internal_error"), "lost"),  # a bug, not a clean failure
        (Outcome(0, 1, 200, False), "lost"),  # the stream was cut: no [DONE], no error event
        (Outcome(0, 1, 502, False), "lost"),  # no OpenAI error body
        (Outcome(0, 60, None, False), "lost"),  # no answer (timeout, connection error)
    ],
)
def test_verdict(outcome: Outcome, expected: str) -> None:
    assert verdict(outcome) == expected


def test_summary_counts_each_verdict_and_times_failures_from_the_fault() -> None:
    fault_s = 100.0
    outcomes = [
        Outcome(90, 95, 200, True),
        Outcome(97, 103, 200, True, fallbacks=1),
        Outcome(98, 104.5, 200, False, "decode_failed"),  # cut mid-stream 4.5 s after the fault
        Outcome(99, 101, 502, False, "decode_failed"),
        Outcome(110, 110.2, 503, False, "no_replica"),  # sent later: answered in 0.2 s
        Outcome(111, 111.5, 503, False, "no_replica"),
        Outcome(112, 172, None, False),  # hung until the client's timeout
    ]
    row = summarize("kill-decode", 4, outcomes, fault_s, recovered_s=42.0)
    assert (row.sent, row.succeeded, row.fell_back, row.failed_cleanly, row.lost) == (
        7, 2, 1, 4, 1,
    )  # fmt: skip
    assert row.cut_answered_s == pytest.approx(4.5)
    assert row.later_answered_s == pytest.approx(0.5)
    assert row.recovered_s == 42.0 and row.abandoned == 0
    table = markdown_table([row])
    assert "| SIGKILL the decode engine process mid-stream | 4 | 7 | 2 | 1 | 4 | 1 | 0 |" in table
    assert row.failure_codes == {"200 decode_failed": 1, "502 decode_failed": 1,
                                 "503 no_replica": 2}  # fmt: skip
    assert table.rstrip().endswith(
        "| 4.5 | 0.5 | 42.0 | 1x 200 decode_failed, 1x 502 decode_failed, 2x 503 no_replica |"
    )


def test_abandoned_requests_are_neither_served_nor_lost() -> None:
    outcomes = [Outcome(0, 2, None, False, abandoned=True) for _ in range(3)]
    row = summarize("client-gone", 3, outcomes, fault_s=2.0, recovered_s=None)
    assert (row.sent, row.abandoned, row.lost, row.succeeded) == (3, 3, 0, 0)
    assert "| - | - | - | - |" in markdown_table([row])  # no failure; never recovered
