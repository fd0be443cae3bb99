"""A run that stops goes on from its checkpoint, and every step is stored exactly once.

A real daemon with the local launcher runs the real trainer; the trainer is
killed (SIGKILL, a crash) or stopped (a SIGTERM that is not the daemon's, as a
shutdown sends) part-way. The store's steps are then 1..N, each once, with the
losses the trainer made first (its redone steps make the same losses, bit for
bit: tests/trainer/test_trainer_resume.py).
"""

import json
import os
import signal
import subprocess
import sys

import pytest
from procs import trainers, wait_for

from daemon import faults

pytestmark = pytest.mark.slow

#: Long enough that the run is still going when the test stops it after its first checkpoint.
STEPS = 300
RUN = ["--cards", "1", "--resident", "1", "--seq-len", "16", "--accum", "1", "--lr", "1e-3",
       "--model", "tiny-llama", "--steps", str(STEPS), "--checkpoint-every", "4"]


def start_daemon(home):
    env = {k: v for k, v in os.environ.items() if k != faults.ENV}
    return subprocess.Popen(
        [sys.executable, "-m", "rngdctl", "--home", str(home.path), "daemon", "--tick", "0.2",
         "--exit-when-idle"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=env)


def past_a_checkpoint(home, run):
    """The trainer's pid once a checkpoint is stored and steps beyond it too."""
    with home.store() as store:
        written = store.events(run_id=run, kinds=["checkpoint"])
        stored = store.step_counts(run).get("main", 0)
        if not written or stored < written[0]["data"]["step"] + 2:
            return None
        current = store.run(run)
        assert current["status"] == "running", "the run ended before the test could stop it"
        return current["pid"]


def logged_copies(home, run) -> dict[int, set[float]]:
    """Each step's losses as the trainer wrote them, over every attempt."""
    copies: dict[int, set[float]] = {}
    for line in (home.path / "runs" / str(run) / "output.log").read_text().splitlines():
        if line.startswith('{"kind":"step"'):
            record = json.loads(line)
            copies.setdefault(record["step"], set()).add(record["loss"])
    return copies


def assert_every_step_once(home, run):
    with home.store() as store:
        final = store.run(run)
        stored = store.steps(run)
        resumed = store.events(run_id=run, kinds=["resume"])
    assert final["status"] == "done", final["exit_reason"]
    assert [s["step"] for s in stored] == list(range(1, STEPS + 1))
    copies = logged_copies(home, run)
    assert all(len(losses) == 1 for losses in copies.values())  # redone steps: same loss
    assert [s["loss"] for s in stored] == [copies[s["step"]].pop() for s in stored]
    return resumed


def test_a_crashed_run_resumed_goes_on_from_its_checkpoint_storing_each_step_once(
        home, rngdctl):
    _, out, _ = rngdctl("submit", *RUN)
    run = int(out)
    daemon = start_daemon(home)
    pid = wait_for(lambda: past_a_checkpoint(home, run), timeout=180)
    os.killpg(pid, signal.SIGKILL)  # a crash: no end record, no last checkpoint
    assert daemon.wait(timeout=120) == 0, daemon.stderr.read()
    with home.store() as store:
        assert store.run(run)["status"] != "done"
        before = store.step_counts(run)["main"]
    code, out, err = rngdctl("resume", str(run))
    assert code == 0 and f"run {run} queued again: goes on from" in out, err
    daemon = start_daemon(home)
    assert daemon.wait(timeout=180) == 0, daemon.stderr.read()
    (resume,) = assert_every_step_once(home, run)
    assert resume["data"]["step"] <= before  # it went back to its checkpoint, and on
    assert trainers(home) == []


def test_a_sigterm_that_is_not_the_daemons_requeues_the_run_and_it_goes_on(home, rngdctl):
    _, out, _ = rngdctl("submit", *RUN)
    run = int(out)
    daemon = start_daemon(home)
    pid = wait_for(lambda: past_a_checkpoint(home, run), timeout=180)
    os.kill(pid, signal.SIGTERM)  # a shutdown: the trainer finishes its step and checkpoints
    assert daemon.wait(timeout=240) == 0, daemon.stderr.read()
    assert_every_step_once(home, run)
    with home.store() as store:
        retried = store.events(run_id=run, kinds=["retry"])
        ends = [e["data"]["status"] for e in store.events(run_id=run, kinds=["end"])]
    assert retried[0]["data"]["class"] == "preempted"
    assert ends == ["preempted", "ok"]


def test_a_deadline_stops_the_trainer_with_sigterm_after_a_whole_step(home, rngdctl):
    _, out, _ = rngdctl("submit", *RUN[:-3], "100000", "--deadline", "1")
    run = int(out)
    daemon = start_daemon(home)
    assert daemon.wait(timeout=180) == 0, daemon.stderr.read()
    with home.store() as store:
        final = store.run(run)
        (end,) = store.events(run_id=run, kinds=["end"])
    assert final["status"] == "timeout"
    assert end["data"]["status"] == "preempted"  # SIGTERM, not SIGKILL: it ended itself
    assert final["exit_code"] == 128 + signal.SIGTERM
