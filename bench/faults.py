"""Fault runs judged (pure): each request's outcome, the verdict a user would give it, and one
reliability-table row per fault.

`pdserve bench-faults` (bench/faults_run.py) keeps a steady stream load on a running cluster,
injects a fault into a real engine process and records one `Outcome` per request; this module
turns them into the table `bench/RESULTS.md` records.

Verdicts, per request:
- succeeded: 200 and the stream ended with `[DONE]`; `fell_back` when the router recovered it
  (the `x-pdserve-decision` header lists fallbacks);
- failed cleanly: an OpenAI error (an HTTP 429/502/503/504 body, or an SSE error event after
  the first token) with a stable code, answered in time;
- lost: anything else (a 500, a transport error, a stream cut without `[DONE]` or an error
  event, no answer within the request timeout).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

FaultName = Literal["kill-prefill", "freeze-prefill", "kill-decode", "client-gone"]
FAULTS: tuple[FaultName, ...] = ("client-gone", "freeze-prefill", "kill-prefill", "kill-decode")
"""In the order a run injects them (the least disruptive first)."""

DESCRIPTIONS: dict[FaultName, str] = {
    "kill-prefill": "SIGKILL one prefill engine process",
    "freeze-prefill": "SIGSTOP one prefill engine process (a hang, not a crash)",
    "kill-decode": "SIGKILL the decode engine process mid-stream",
    "client-gone": "clients leave between prefill and decode (decode engine stalled)",
}

CLEAN_STATUSES = frozenset({200, 429, 502, 503, 504})
"""Statuses a request may fail with cleanly (200: an error event after the first token)."""

Verdict = Literal["succeeded", "fell_back", "failed_cleanly", "lost"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request under fault. Times are seconds on the run's monotonic clock."""

    started_s: float
    ended_s: float
    status: int | None
    """HTTP status; None when no answer came (transport error, timeout, cancelled)."""
    completed: bool
    """The stream ended with [DONE]."""
    error_code: str | None = None
    """The `code` of an OpenAI error body or SSE error event."""
    fallbacks: int = 0
    """Fallbacks the router listed in x-pdserve-decision."""
    abandoned: bool = False
    """The client itself left (the client-gone fault): judged by what the server freed."""


def verdict(outcome: Outcome) -> Verdict:
    """How a user would judge one request."""
    if outcome.status == 200 and outcome.completed:
        return "fell_back" if outcome.fallbacks else "succeeded"
    if outcome.status in CLEAN_STATUSES and outcome.error_code:
        return "failed_cleanly"
    return "lost"


@dataclass(frozen=True, slots=True)
class FaultRow:
    """One line of the reliability table."""

    fault: FaultName
    clients: int
    sent: int
    succeeded: int
    """Includes those that fell back."""
    fell_back: int
    failed_cleanly: int
    lost: int
    abandoned: int
    cut_answered_s: float | None
    """Requests in flight at the fault that failed cleanly: the longest time from the fault
    to their error (None without one)."""
    later_answered_s: float | None
    """Requests sent after the fault that failed cleanly: the longest of their latencies."""
    recovered_s: float | None
    """Fault to recovery: the replaced replica reports healthy (kill/freeze), or the prefill
    engines' KV usage is back to idle (client-gone); None if it did not within the run."""
    failure_codes: dict[str, int]
    """Clean failures by status and code, e.g. {"502 decode_failed": 3}."""


def summarize(
    fault: FaultName,
    clients: int,
    outcomes: Sequence[Outcome],
    fault_s: float,
    recovered_s: float | None,
) -> FaultRow:
    """The table row of one fault run; `fault_s` is when the fault was injected."""
    counted = [o for o in outcomes if not o.abandoned]
    verdicts = [verdict(o) for o in counted]
    clean = [o for o, v in zip(counted, verdicts, strict=True) if v == "failed_cleanly"]
    cut = [o.ended_s - fault_s for o in clean if o.started_s < fault_s]
    later = [o.ended_s - o.started_s for o in clean if o.started_s >= fault_s]
    return FaultRow(
        fault=fault,
        clients=clients,
        sent=len(outcomes),
        succeeded=sum(v in ("succeeded", "fell_back") for v in verdicts),
        fell_back=verdicts.count("fell_back"),
        failed_cleanly=len(clean),
        lost=verdicts.count("lost"),
        abandoned=len(outcomes) - len(counted),
        cut_answered_s=max(cut, default=None),
        later_answered_s=max(later, default=None),
        recovered_s=recovered_s,
        failure_codes=dict(Counter(f"{o.status} {o.error_code}" for o in clean)),
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _codes(codes: dict[str, int]) -> str:
    return ", ".join(f"{n}x {code}" for code, n in sorted(codes.items())) or "-"


def markdown_table(rows: Sequence[FaultRow]) -> str:
    """The reliability table, as bench/RESULTS.md records it."""
    head = (
        "| fault | load (streams) | sent | succeeded | of which fell back | failed cleanly "
        "| lost | client left | in-flight failures ended (s after fault) "
        "| later failures answered in (s) | recovered (s) | failures by status and code |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    lines = [
        f"| {DESCRIPTIONS[r.fault]} | {r.clients} | {r.sent} | {r.succeeded} | {r.fell_back} "
        f"| {r.failed_cleanly} | {r.lost} | {r.abandoned} | "
        f"{_seconds(r.cut_answered_s)} | {_seconds(r.later_answered_s)} | "
        f"{_seconds(r.recovered_s)} | {_codes(r.failure_codes)} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"
