"""`rngdctl daemon` as docs/design.md has it: it says where it runs and what it does, and
SIGINT or SIGTERM stops it after its tick while the trainer, in a session of its own,
trains on, to be adopted by the next daemon on the home."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from procs import wait_for

pytestmark = pytest.mark.slow

SHORT = ["--cards", "1", "--resident", "2", "--seq-len", "32", "--accum", "1", "--lr", "1e-3",
         "--model", "tiny-llama"]


def start_daemon(home, **popen):
    return subprocess.Popen(
        [sys.executable, "-m", "rngdctl", "--home", str(home.path), "daemon", "--tick", "0.2",
         "--exit-when-idle"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        **popen)


def said(stderr: str) -> list[str]:
    """The daemon's lines, without the logger's time stamp and name."""
    return [line.split(" INFO ", 1)[1] for line in stderr.splitlines() if " INFO " in line]


def test_the_daemon_says_where_it_runs_and_each_launch_and_end(home, rngdctl):
    _, out, _ = rngdctl("submit", *SHORT, "--steps", "3", "--name", "short")
    run = int(out)
    daemon = start_daemon(home)
    _, err = daemon.communicate(timeout=300)

    assert daemon.returncode == 0, err
    lines = said(err)
    assert lines[0] == (f"daemon started on {home.path} (pid {daemon.pid}): launcher local, a "
                        f"tick every 0.2 s; gates: host load < 150, no process holding "
                        f"/dev/rngd*, /dev/rngd/*, cards alive and <= 90 °C (furiosa-smi), one "
                        f"run at a time; 1 passing tick in a row before a launch")
    with home.store() as store:
        stored = store.run(run)
    launched = [line for line in lines if line.startswith(f"run {run} (short) launched")]
    assert launched == [f"run {run} (short) launched: pid {stored['pid']}, 3 steps (attempt 1)"]
    took = stored["ended"] - stored["started"]
    assert f"run {run} (short) done after {took:.0f} s" in lines
    assert lines[-1] == "daemon stopped: idle: the queue is empty and nothing runs"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_ends_the_daemon_and_its_trainer_goes_on_to_be_adopted(home, rngdctl,
                                                                             sig):
    _, out, _ = rngdctl("submit", *SHORT, "--steps", "300")
    run = int(out)
    # Its own process group, as a terminal's foreground job: the signal goes to the group,
    # as Ctrl-C would send it.
    first = start_daemon(home, process_group=0)
    with home.store() as store:
        wait_for(lambda: store.step_counts(run).get("main", 0) >= 3, timeout=600)
        pid = store.run(run)["pid"]
    os.killpg(first.pid, sig)
    _, err = first.communicate(timeout=60)

    assert first.returncode == 0, err
    name = signal.Signals(sig).name
    assert said(err)[-1] == (f"daemon stopped: {name}; run {run} left running, for the next "
                             f"daemon on this home to adopt")
    os.kill(pid, 0)  # the trainer trains on without a daemon
    with home.store() as store:
        assert store.daemon_state()["stop_reason"] == name
        assert store.run(run)["status"] == "running"

    second = start_daemon(home)
    _, err = second.communicate(timeout=600)

    assert second.returncode == 0, err
    with home.store() as store:
        assert store.run(run)["status"] == "done"
        assert [s["step"] for s in store.steps(run)] == list(range(1, 301))
        assert store.events(run_id=run, kinds=["adopt"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"trainer {pid} outlived its run")
