"""Shared builders for the bench unit tests (pure, no network)."""

from __future__ import annotations

import pytest

from pdserve.bench.prompts import Calibration, PromptFactory


@pytest.fixture
def factory() -> PromptFactory:
    """1.25 tokens per word, 3 tokens of overhead (tag + BOS)."""
    return PromptFactory(Calibration(tokens_per_word=1.25, overhead_tokens=3.0), salt="s0")
