"""`rngdctl demo` in a real terminal (a tmux pane: a pseudo-terminal with job control).

Ctrl-C there is what a user presses: the terminal sends SIGINT to the whole foreground
process group in plain lines, and the TUI reads it as a key. Either way the demo stores
the cancel, the trainer stops after a SIGTERM with a checkpoint, and the demo says so
truthfully once it has ended; the TUI says when the run is done and how to go on.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import time

import pytest
from procs import trainers

from tests.conftest import REPO
from tests.tui.tui_support import Pane

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

CANCELLED = re.compile(r"demo interrupted: run 1 cancelled after step (\d+) of 100000; "
                       r"checkpoint (\S+) kept")


class DemoPane(Pane):
    """The demo in a pane, run by a shell that then says how it exited and stays.

    The shell traps SIGINT with a handler (not ignored: an ignored SIGINT would be the
    demo's too), so Ctrl-C reaches the demo and the shell goes on to report.
    """

    EXIT = re.compile(r"\[demo exit (\d+)\]")

    def __init__(self, home, *args: str):
        script = 'trap : INT; "$@"; echo "[demo exit $?]"; exec sleep 3600'
        super().__init__(["sh", "-c", script, "sh", sys.executable, "-m", "rngdctl", "demo",
                          "--home", str(home.path), *args],
                         {"TERM": "xterm-256color", "PYTHONPATH": str(REPO),
                          "OMP_NUM_THREADS": "1"})

    def printed(self) -> str:
        """Everything on the screen and above it, wrapped lines joined."""
        return self._tmux("capture-pane", "-p", "-J", "-S", "-500", "-t", "tui").stdout

    def exit_status(self, timeout: float) -> int:
        found = self.wait_for(lambda _: self.EXIT.search(self.printed()), timeout,
                              "the demo's exit")
        return int(found.group(1))


@pytest.fixture
def demo_pane(home):
    panes = []

    def start(*args: str) -> DemoPane:
        panes.append(DemoPane(home, *args))
        return panes[-1]

    yield start
    for pane in panes:
        pane.close()
    # What a failed test left: the daemon (a session of its own) and the trainer.
    lock = home.path / "daemon.lock"
    pids = trainers(home) + ([int(lock.read_text())] if lock.exists()
                             and lock.read_text().strip().isdigit() else [])
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main_steps(home) -> int:
    with home.store() as store:
        return store.step_counts(1).get("main", 0) if store.runs() else 0


def wait_for_steps(home, n: int) -> None:
    # Start-up (torch, a settling phase, the baseline's first block) takes minutes on a
    # loaded host: the deadline only catches a demo that never trains.
    deadline = time.monotonic() + 600
    while main_steps(home) < n:
        assert time.monotonic() < deadline, f"the demo run never reached step {n}"
        time.sleep(0.2)


def assert_cancelled_truthfully(home, printed: str) -> None:
    with home.store() as store:
        run = store.run(1)
        stored_steps = store.step_counts(1)["main"]
        daemon = store.daemon_state()
    assert trainers(home) == []  # no trainer trains on
    assert run["status"] == "cancelled"  # not running*: the daemon recorded it
    assert daemon["stopped"] is not None  # the daemon exited, idle, after recording it
    found = CANCELLED.search(printed)
    assert found, printed
    assert int(found.group(1)) == stored_steps
    assert os.path.isdir(found.group(2)) and found.group(2).endswith(f"step-{stored_steps}")


def test_ctrl_c_in_the_plain_demo_cancels_the_run_and_waits_for_its_trainer(home, demo_pane):
    pane = demo_pane("--no-tui", "--steps", "100000")
    wait_for_steps(home, 2)
    pane.keys("C-c")  # SIGINT to the terminal's foreground process group
    status = pane.exit_status(300)
    assert_cancelled_truthfully(home, pane.printed())
    assert status == 130


def test_ctrl_c_in_the_demo_tui_cancels_the_run_and_waits_for_its_trainer(home, demo_pane):
    pane = demo_pane("--steps", "100000")
    wait_for_steps(home, 2)
    pane.wait_for(lambda t: "current run" in t, 60, "the TUI")
    pane.keys("C-c")  # a key to the TUI: the terminal is raw
    status = pane.exit_status(300)
    assert_cancelled_truthfully(home, pane.printed())
    assert status == 130


def test_the_demo_tui_says_when_the_run_is_done_and_the_summary_gives_its_own_time(
        home, demo_pane):
    pane = demo_pane("--steps", "6")
    pane.wait_for(lambda t: "done: q for the note and the model" in t, 600, "the run's end")
    time.sleep(3)  # the TUI stays open: its time is not the run's
    pane.keys("q")
    assert pane.exit_status(300) == 0
    with home.store() as store:
        run = store.run(1)
    assert f"run 1: done in {run['ended'] - run['started']:.0f} s" in pane.printed()
