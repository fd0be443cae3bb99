"""Snapshots of the main screen at 120x40 and 80x24 on the recorded session.

Deterministic: the app's clock is fixed, times print in UTC (conftest), the
refresh timer never fires during the test, and the first refresh is awaited.
Update with `pytest tests/tui/test_snapshots.py --snapshot-update`, then look
at the SVGs before committing them.
"""

from __future__ import annotations

import pytest
from textual.worker import WorkerFailed


async def first_refresh(pilot) -> None:
    try:
        await pilot.app.workers.wait_for_complete()
    except WorkerFailed:
        pass
    await pilot.pause()


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
def test_the_main_screen_looks_as_recorded(snap_compare, make_app, size):
    assert snap_compare(make_app(), terminal_size=size, run_before=first_refresh)
