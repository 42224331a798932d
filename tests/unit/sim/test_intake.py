"""The serving layer's intake (sim/intake.py): busy stretches first in first out, and what
passes through them."""

from __future__ import annotations

import pytest

from pdserve.sim.intake import Intake


def test_prompts_that_arrive_together_are_taken_in_one_after_the_other() -> None:
    intake = Intake()
    intake.take_in("a", 1.0, 0.02)
    intake.take_in("b", 1.005, 0.03)  # waits for a's work: busy 1.02-1.05
    assert intake.passes_at("x", 1.01) == pytest.approx(1.05)  # a's stretch, then b's
    assert intake.passes_at("x", 1.03) == pytest.approx(1.05)
    assert intake.passes_at("x", 0.99) == pytest.approx(0.99)  # before it
    assert intake.passes_at("x", 1.05) == pytest.approx(1.05)  # at its end
    assert intake.passes_at("x", 2.0) == pytest.approx(2.0)


def test_a_request_is_not_held_up_by_its_own_prompt() -> None:
    intake = Intake()
    intake.take_in("a", 0.0, 0.01)
    assert intake.passes_at("a", 0.005) == pytest.approx(0.005)
    intake.take_in("b", 0.002, 0.01)  # 0.01-0.02, queued behind a's
    assert intake.passes_at("a", 0.012) == pytest.approx(0.02)  # b's holds a up
    assert intake.passes_at("b", 0.005) == pytest.approx(0.01)  # a's holds b up, not b's own


def test_an_idle_intake_and_no_work_hold_nothing_up() -> None:
    intake = Intake()
    intake.take_in("a", 0.0, 0.0)
    assert intake.passes_at("x", 0.0) == 0.0
    intake.take_in("a", 1.0, 0.01)
    intake.take_in("b", 3.0, 0.01)  # the intake was free again: starts at its arrival
    assert intake.passes_at("x", 2.0) == pytest.approx(2.0)
    assert intake.passes_at("x", 3.001) == pytest.approx(3.01)
