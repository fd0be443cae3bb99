"""The monitor rings the bell and shows a toast when a run starts, finishes or fails, and
when the gates clear after a long block: the `notify` events the daemon stores."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pytest
from tui_support import NOW, Pane

from daemon.run.spec import validate
from rngdctl.tui import app as app_module
from rngdctl.tui.app import RngdApp
from rngdctl.tui.notices import notice_of


class BellCountingApp(RngdApp):
    """The app, counting its bells (a headless app's bell writes nothing to observe)."""

    CSS_PATH = str(Path(app_module.__file__).with_name(RngdApp.CSS_PATH))  # not beside this test
    bells = 0

    def bell(self) -> None:
        self.bells += 1
        super().bell()


@pytest.fixture
def make_bell_app(home, ids, tmp_path):
    def make(**kw):
        return BellCountingApp(home, clock=lambda: NOW, refresh_s=3600.0,
                               export_dir=tmp_path / "experiments", **kw)

    return make


def _notify(store, run_id: int, on: str, status: str, message: str, **data) -> None:
    """The event the daemon stores (docs/design.md, "Notifications")."""
    store.add_event(run_id, "notify", message, now=NOW,
                    data={"on": on, "status": status, "name": None, "median_step_s": None,
                          "note": None, "command": None, **data})


def _toasts(app) -> list[tuple[str, str, str]]:
    return [(n.title, n.message, n.severity) for n in app._notifications]


async def test_a_run_failing_rings_the_bell_and_shows_a_toast(make_bell_app, settle, store,
                                                              ids):
    async with make_bell_app().run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot)
        assert pilot.app.bells == 0
        _notify(store, ids["r200"], "failure", "failed", "run 3 (r200) failed: exit code 1")
        pilot.app.refresh_data()
        await settle(pilot)
        assert pilot.app.bells == 1
        assert _toasts(pilot.app) == [("run failed", "run 3 (r200) failed: exit code 1",
                                       "error")]
        assert "run 3 (r200) failed: exit code 1" in pilot.app.frame_text()


async def test_start_finish_and_cleared_gates_each_get_a_toast_and_one_bell(make_bell_app,
                                                                            settle, store, ids):
    async with make_bell_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        _notify(store, ids["next"], "gates_cleared", "queued",
                "run 4 (next): gates cleared after 14 m blocked", blocked_s=840.0)
        _notify(store, ids["next"], "start", "running", "run 4 (next) started")
        _notify(store, ids["r60"], "finish", "done", "run 1 (r60) done")
        _notify(store, ids["later"], "finish", "cancelled", "run 5 (later) cancelled")
        pilot.app.refresh_data()
        await settle(pilot)
        assert pilot.app.bells == 1
        assert _toasts(pilot.app) == [
            ("gates cleared", "run 4 (next): gates cleared after 14 m blocked", "information"),
            ("run started", "run 4 (next) started", "information"),
            ("run finished", "run 1 (r60) done", "information"),
            ("run finished", "run 5 (later) cancelled", "warning"),
        ]


async def test_events_from_before_the_monitor_opened_ring_nothing(make_bell_app, settle, store,
                                                                 ids):
    _notify(store, ids["r60"], "finish", "done", "run 1 (r60) done")
    async with make_bell_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        pilot.app.refresh_data()
        await settle(pilot)
        assert pilot.app.bells == 0 and _toasts(pilot.app) == []


async def test_each_event_rings_once_even_when_the_filter_redraws_the_panels(make_bell_app,
                                                                            settle, store, ids):
    async with make_bell_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        _notify(store, ids["r200"], "start", "running", "run 3 (r200) started")
        pilot.app.refresh_data()
        await settle(pilot)
        await pilot.press("slash", "r", "enter")
        pilot.app.refresh_data()
        await settle(pilot)
        assert pilot.app.bells == 1 and len(_toasts(pilot.app)) == 1


def test_other_events_and_unknown_moments_are_no_notice():
    assert notice_of({"kind": "notify", "message": "x", "data": {"on": "lunch"}}) is None
    assert notice_of({"kind": "notify", "message": "x", "data": None}) is None


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_in_a_real_terminal_a_failure_rings_its_bell_and_shows_the_toast(home):
    with home.store() as store:
        run_id = store.add_run(validate({"cards": 1, "resident": 1, "steps": 10}), name="bell")
    repo = Path(__file__).resolve().parents[2]
    pane = Pane([sys.executable, "-m", "rngdctl", "--home", str(home.path), "tui"],
                {"TERM": "xterm-256color", "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"})
    try:
        pane.wait_for(lambda t: "#1 bell" in t, 60, "the first refresh")
        time.sleep(1.5)  # a refresh or more with nothing to tell
        assert not pane.bell_rung()
        with home.store() as store:
            _notify(store, run_id, "failure", "failed", "run 1 (bell) failed: exit code 1")
        pane.wait_for(lambda t: "run 1 (bell) failed: exit code 1" in t, 30, "the toast")
        assert pane.bell_rung()
    finally:
        pane.close()


async def test_the_real_schedulers_start_and_failure_ring_the_monitor(home, store, settle,
                                                                     tmp_path):
    from daemon.launchers.base import Outcome
    from daemon.probes.host_reading import HostReading
    from daemon.scheduling.loop import Daemon
    from tests.queue.conftest import ScriptedLauncher

    run_id = store.add_run(validate({"cards": 1, "resident": 0, "steps": 5}), name="e2e",
                           now=NOW - 60)
    launcher = ScriptedLauncher()
    daemon = Daemon(home, store, home.config(), launcher,
                    probe=lambda: HostReading(0.0, (1.0, 1.0, 1.0), (), True))
    daemon.start()
    try:
        app = BellCountingApp(home, clock=lambda: NOW, refresh_s=3600.0,
                              export_dir=tmp_path / "experiments")
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            for k in range(5):  # the gates pass [gates] consecutive ticks in a row, then it starts
                daemon.tick(now=NOW + k)
                if launcher.launched:
                    break
            assert launcher.launched == [run_id]
            app.refresh_data()
            await settle(pilot)
            assert app.bells == 1
            launcher.outcomes[run_id] = Outcome("failed", "exit code 1")
            daemon.tick(now=NOW + 10)
            app.refresh_data()
            await settle(pilot)
            assert app.bells == 2
            assert [(t, m) for t, m, _ in _toasts(app)] == [
                ("run started", f"run {run_id} (e2e) started"),
                ("run failed", f"run {run_id} (e2e) failed: exit code 1"),
            ]
    finally:
        daemon.close()
