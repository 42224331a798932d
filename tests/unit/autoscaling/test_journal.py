"""The journal that turns a pool policy's ticks into the document the routers show: scale events
are changes of Serve's target, with the reason of the decision that asked for them; the
document is republished on change or once a second, and keeps a bounded event list."""

from __future__ import annotations

from pdserve.autoscaling.journal import MAX_EVENTS, PoolScaling, ScalingJournal
from pdserve.autoscaling.policy import ScaleDecision, prefill_replicas

UP = prefill_replicas([3.0], current=1, target_ttft_s=1.0)
HOLD = prefill_replicas([0.7], current=2, target_ttft_s=1.0)
DOWN = prefill_replicas([0.0, 0.0], current=2, target_ttft_s=1.0)


def test_the_reason_of_a_scale_up_is_the_decision_that_asked_for_it() -> None:
    journal = ScalingJournal("prefill")
    doc, event = journal.tick(UP, current=1, target=1, now_unix_s=10.0)
    assert event is None and doc is not None and doc.wanted_replicas == 3
    # Serve applies its delay; by the time the target moves the policy may already hold.
    doc, event = journal.tick(HOLD, current=1, target=2, now_unix_s=14.0)
    assert event is not None and (event.from_replicas, event.to_replicas) == (1, 2)
    assert event.reason == UP.reason and event.unix_s == 14.0
    assert doc is not None and doc.events == (event,)


def test_a_scale_down_names_the_down_decision_and_a_change_without_one_says_so() -> None:
    journal = ScalingJournal("prefill")
    journal.tick(DOWN, current=2, target=2, now_unix_s=0.0)
    _, down = journal.tick(DOWN, current=2, target=1, now_unix_s=30.0)
    assert down is not None and down.reason == DOWN.reason
    _, up = journal.tick(HOLD, current=1, target=3, now_unix_s=40.0)  # e.g. a redeploy
    assert up is not None and "outside the policy" in up.reason


def test_unchanged_state_is_republished_once_a_second_only() -> None:
    journal = ScalingJournal("prefill", publish_every_s=1.0)
    assert journal.tick(HOLD, 2, 2, 0.0)[0] is not None
    assert journal.tick(HOLD, 2, 2, 0.5)[0] is None
    assert journal.tick(HOLD, 2, 2, 1.2)[0] is not None
    assert journal.tick(UP, 2, 2, 1.3)[0] is not None  # the wanted count changed


def test_the_event_list_is_bounded_and_the_document_round_trips_as_json() -> None:
    journal = ScalingJournal("decode")
    hold = ScaleDecision(1, "hold", 0.1, 0.8, "hold")
    doc = None
    for i in range(MAX_EVENTS + 5):
        doc, _ = journal.tick(hold, current=1, target=1 + i % 2, now_unix_s=float(i))
    assert doc is not None and len(doc.events) == MAX_EVENTS
    assert doc.events[-1].unix_s == MAX_EVENTS + 4
    assert PoolScaling.model_validate_json(doc.model_dump_json()) == doc
