"""Fixtures for unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.simulation import SimCluster


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    cluster = SimCluster()
    yield cluster
    cluster.close()
    assert not cluster.violations, cluster.violations
