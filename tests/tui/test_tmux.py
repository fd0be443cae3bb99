"""The real app in a real terminal (tmux) while the daemon runs a real trainer.

`rngdctl submit`, then `rngdctl daemon --exit-when-idle` with the local
launcher, then `rngdctl tui` in a tmux pane: the pane must show the step count
advancing; cancelling from the TUI (`c`, then `y`) stops the run, and the
daemon, with nothing left to do, exits.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tui_support import Pane

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

STEP = re.compile(r"step ([\d,]+) of 2,000")


def test_the_tui_in_tmux_follows_a_live_run_and_cancels_it(home, rngdctl, tmp_path):
    code, _, err = rngdctl("submit", "--cards", "1", "--resident", "1", "--steps", "2000",
                           "--seq-len", "128", "--accum", "2", "--name", "live")
    assert code == 0, err
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    log = open(tmp_path / "daemon.log", "w")  # noqa: SIM115 - closed in finally
    daemon = subprocess.Popen(
        [sys.executable, "-m", "rngdctl", "--home", str(home.path), "daemon",
         "--exit-when-idle", "--tick", "0.5"], stdout=log, stderr=subprocess.STDOUT, env=env,
        cwd=REPO)
    pane = Pane([sys.executable, "-m", "rngdctl", "--home", str(home.path), "tui"],
                {"TERM": "xterm-256color", "PYTHONPATH": str(REPO),
                 "OMP_NUM_THREADS": "1"})
    try:
        def step(text):
            m = STEP.search(text)
            return int(m.group(1).replace(",", "")) if m and m.group(1) != "0" else None

        first = pane.wait_for(step, 90, "the first steps")
        later = pane.wait_for(lambda t: (step(t) or 0) > first and step(t), 30,
                              f"a step after {first}")
        assert later > first
        assert "● daemon alive" in pane.text()

        pane.keys("1", "c")
        pane.wait_for(lambda t: "Cancel run #1 live" in t, 10, "the cancel question")
        pane.keys("y")
        assert daemon.wait(timeout=60) == 0
        pane.wait_for(lambda t: "⊘ cancelled" in t, 10, "the run shown cancelled")

        pane.keys("q")
        deadline = time.monotonic() + 10
        while pane.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pane.alive(), "q did not quit the app"
    finally:
        pane.close()
        if daemon.poll() is None:
            daemon.terminate()
            daemon.wait(timeout=30)
        log.close()
    with home.store() as store:
        run = store.run("live")
        steps = store.steps(run["id"])
    assert run["status"] == "cancelled"
    assert 0 < len(steps) < 2000
