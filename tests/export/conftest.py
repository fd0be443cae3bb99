"""Fixtures of the export tests; ``store``, ``home`` and ``rngdctl`` come from tests/conftest.py."""

from __future__ import annotations

import pytest
from recorded import record_run


@pytest.fixture
def recorded(store):
    """Adds a recorded run to the test's store; returns its id."""
    return lambda steps, **kw: record_run(store, steps, **kw)
