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


async def overlay_with_an_ema(pilot) -> None:
    """History: mark #2 and #1, overlay their losses, smooth them by the first EMA."""
    await first_refresh(pilot)
    await pilot.press("4", "m", "down", "m", "o")
    await first_refresh(pilot)
    await pilot.press("s")
    await first_refresh(pilot)


def test_two_runs_losses_overlaid_and_smoothed_look_as_recorded(snap_compare, make_app):
    assert snap_compare(make_app(), terminal_size=(120, 40), run_before=overlay_with_an_ema)
