"""OutstandingWork: in-flight prefill seconds per replica and the starvation (aging) rule."""

from __future__ import annotations

import pytest

from pdserve.router.policy import OutstandingWork


def test_outstanding_sums_estimates_and_finish_removes() -> None:
    w = OutstandingWork()
    assert w.outstanding_s("p0") == 0.0
    w.start("p0", "a", 0.5, 1, now_s=0.0)
    w.start("p0", "b", 0.25, 0, now_s=0.0)
    w.start("p1", "c", 2.0, 3, now_s=0.0)
    assert (w.outstanding_s("p0"), w.outstanding_s("p1")) == (0.75, 2.0)
    assert w.num_in_flight("p0") == 2
    assert w.finish("p0", "a") is True
    assert w.outstanding_s("p0") == 0.25
    assert w.finish("p0", "a") is False  # twice
    assert w.finish("p9", "a") is False  # unknown replica
    assert w.finish("p0", "b") is True
    assert (w.outstanding_s("p0"), w.num_in_flight("p0")) == (0.0, 0)


def test_sum_resets_exactly_when_empty() -> None:
    w = OutstandingWork()
    for i in range(1000):
        w.start("p0", str(i), 0.1, 0, now_s=0.0)
    for i in range(1000):
        w.finish("p0", str(i))
    assert w.outstanding_s("p0") == 0.0


def test_duplicate_start_is_an_error() -> None:
    w = OutstandingWork()
    w.start("p0", "a", 0.5, 1, now_s=0.0)
    with pytest.raises(ValueError, match="already in flight"):
        w.start("p0", "a", 0.5, 1, now_s=0.0)
    w.start("p1", "a", 0.5, 1, now_s=0.0)  # another replica is fine (a retry elsewhere)


# (request, est_s, priority, start_s) in flight on p0; now = 10, aging = 1.
@pytest.mark.parametrize(
    ("in_flight", "want"),
    [
        ([], None),
        ([("a", 0.5, 3, 9.0)], None),  # waited 1.0 <= 0.5 + 1
        ([("a", 0.5, 3, 8.4)], 3),  # waited 1.6 > 1.5
        ([("a", 8.0, 3, 0.5)], 3),  # waited 9.5 > 9
        ([("a", 9.0, 3, 0.5)], None),  # long estimate: still within it
        ([("a", 0.1, 2, 0.0), ("b", 0.1, 5, 0.0), ("c", 0.1, 0, 9.9)], 5),  # least urgent
    ],
)
def test_starving_priority(
    in_flight: list[tuple[str, float, int, float]], want: int | None
) -> None:
    w = OutstandingWork()
    for rid, est, prio, start in in_flight:
        w.start("p0", rid, est, prio, now_s=start)
    assert w.starving_priority("p0", now_s=10.0, aging_s=1.0) == want
    assert w.starving_priority("p1", now_s=10.0, aging_s=1.0) is None


def test_forget_replica() -> None:
    w = OutstandingWork()
    w.start("p0", "a", 0.5, 1, now_s=0.0)
    w.forget_replica("p0")
    assert (w.outstanding_s("p0"), w.finish("p0", "a")) == (0.0, False)
