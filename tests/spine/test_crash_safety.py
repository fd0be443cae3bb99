"""Never two trainers, whatever instant the daemon dies (local launcher).

A real daemon subprocess is SIGKILLed at each fault point (RNGDCTL_FAULT), a
second one finishes the run; a thread samples `ps` all along. Before the
trainer's lock, a kill after the spawn left the run `launching` with no pid,
and the next daemon started a second trainer on the same output.log.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
from procs import PsSampler, trainers

from daemon import faults

pytestmark = pytest.mark.slow

STEPS = 25
SHORT = ["--cards", "1", "--resident", "2", "--seq-len", "32", "--accum", "1", "--lr", "1e-3",
         "--model", "tiny-llama", "--steps", str(STEPS)]


def start_daemon(home, fault=None):
    env = {k: v for k, v in os.environ.items() if k != faults.ENV}
    if fault:
        env[faults.ENV] = fault
    return subprocess.Popen(
        [sys.executable, "-m", "rngdctl", "--home", str(home.path), "daemon", "--tick", "0.2",
         "--exit-when-idle"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=env)


def starts_in_output(home, run):
    text = (home.path / "runs" / str(run) / "output.log").read_text(errors="replace")
    return sum(1 for line in text.splitlines() if line.startswith('{"kind":"start"'))


@pytest.mark.parametrize("point", faults.POINTS)
def test_a_daemon_killed_at_each_launch_point_leaves_one_trainer_and_every_step_once(
        point, home, rngdctl):
    _, out, _ = rngdctl("submit", *SHORT)
    run = int(out)
    with PsSampler(home) as ps:
        first = start_daemon(home, fault=point)
        assert first.wait(timeout=120) == -signal.SIGKILL, first.stderr.read()
        with home.store() as store:
            killed = store.run(run)
        second = start_daemon(home)
        assert second.wait(timeout=180) == 0, second.stderr.read()
    with home.store() as store:
        final = store.run(run)
        steps = [s["step"] for s in store.steps(run)]
        adopted = [e["message"] for e in store.events(run_id=run, kinds=["adopt"])]
    # Where the first daemon died, as the store saw it.
    if point == "after_claim":
        assert (killed["status"], killed["pid"]) == ("launching", None)
    if point == "after_spawn":
        assert (killed["status"], killed["pid"]) == ("launching", None)
        assert adopted and "never stored" in adopted[0]
    if point in ("after_record", "after_first_step"):
        assert killed["status"] == "running" and killed["pid"]
    assert final["status"] == "done", final["exit_reason"]
    assert steps == list(range(1, STEPS + 1))
    assert starts_in_output(home, run) == 1  # one trainer ever ran
    assert ps.samples > 10 and ps.most == 1
    assert trainers(home) == []


def test_a_trainer_holds_its_runs_lock_for_as_long_as_it_lives(home, rngdctl):
    from daemon.launchers.local import TRAINER_LOCK, lock_holder, trainer_lock_held

    _, out, _ = rngdctl("submit", *SHORT[:-1], "100000")
    run = int(out)
    lock = home.path / "runs" / str(run) / TRAINER_LOCK
    daemon = start_daemon(home, fault="after_record")
    assert daemon.wait(timeout=120) == -signal.SIGKILL
    with home.store() as store:
        pid = store.run(run)["pid"]
    try:
        assert trainer_lock_held(lock)
        assert lock_holder(lock).pid == pid
    finally:
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while trainer_lock_held(lock) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not trainer_lock_held(lock)
