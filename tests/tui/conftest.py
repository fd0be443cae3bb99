"""Fixtures for the TUI tests: a fixed clock, UTC, and the app on the recorded session."""

from __future__ import annotations

import os
import time

import pytest
from textual.worker import WorkerFailed
from tui_support import NOW, fill


@pytest.fixture(autouse=True)
def utc():
    """Clock times print in UTC, whatever the machine's zone."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.fixture
def ids(store):
    return fill(store)


@pytest.fixture
def make_app(home, ids, tmp_path):
    """The app on the recorded home at the fixed clock; refreshes only when asked."""
    from rngdctl.tui.app import RngdApp

    def make(**kw):
        kw.setdefault("clock", lambda: NOW)
        kw.setdefault("refresh_s", 3600.0)
        kw.setdefault("export_dir", tmp_path / "experiments")
        return RngdApp(home, **kw)

    return make


async def _settle(pilot) -> None:
    for _ in range(2):
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerFailed:
            pass  # the app's one error handler shows it; tests look there
        await pilot.pause()


@pytest.fixture
def settle():
    """``await settle(pilot)``: wait for the workers and the messages they posted."""
    return _settle
