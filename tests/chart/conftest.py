"""Fixtures for the Helm chart tests (offline: helm-python-sdk, no cluster, no helm binary)."""

from __future__ import annotations

from collections.abc import Iterator

import helm_python
import pytest

from tests.chart.helpers import CHART_DIR


@pytest.fixture(scope="session")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART_DIR) as loaded:
        yield loaded
