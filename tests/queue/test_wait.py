"""`rngdctl wait RUN...`: one line per run as it ends; exit 0 only if all are done."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from daemon.errors import NoDaemon
from daemon.scheduling.liveness import ALIVE, NEVER, Liveness
from daemon.scheduling.waiting import wait_for_runs
from tests.conftest import REPO
from trainer import records

CONFIG = {"cards": 1, "resident": 0, "steps": 5}


class FakeTime:
    """A clock that only moves when the waiter sleeps; each sleep can run a scripted change."""

    def __init__(self, script=None):
        self.now, self.slept, self.script = 0.0, [], list(script or [])

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds
        if self.script:
            self.script.pop(0)()


def test_runs_are_reported_in_the_order_they_end(store):
    a, b = store.add_run(CONFIG), store.add_run(CONFIG)
    t = FakeTime([lambda: store.finish_run(b, "done"), lambda: None,
                  lambda: store.finish_run(a, "failed", reason="exit 1\ntail")])
    seen = []

    ended, pending = wait_for_runs(store, [a, b], interval=2.0, on_end=lambda r: seen.append(
        (r["id"], r["status"])), clock=t.clock, sleep=t.sleep)

    assert seen == [(b, "done"), (a, "failed")]
    assert (ended, pending) == ({b: "done", a: "failed"}, [])
    assert t.slept == [2.0, 2.0, 2.0]


def test_a_timeout_returns_the_runs_that_did_not_end(store):
    a = store.add_run(CONFIG)
    t = FakeTime()

    ended, pending = wait_for_runs(store, [a], timeout=5.0, interval=2.0, clock=t.clock,
                                   sleep=t.sleep)

    assert (ended, pending) == ({}, [a])
    assert t.slept == [2.0, 2.0, 1.0]


def test_wait_exits_0_when_every_run_is_done(cli, store):
    a, b = store.add_run(CONFIG, name="first"), store.add_run(CONFIG)
    store.finish_run(a, "done")
    store.finish_run(b, "done")

    result = cli("wait", "first", str(b))

    assert result.exit_code == 0
    assert result.output == f"run {a} (first): done\nrun {b}: done\n"


def test_wait_exits_1_when_a_run_failed_and_says_why(cli, store):
    a, b = store.add_run(CONFIG), store.add_run(CONFIG)
    store.finish_run(a, "done")
    store.finish_run(b, "oom", reason="out of memory in backward of layer 3\nmore")

    result = cli("wait", str(a), str(b), "--json")

    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["id"], r["status"]) for r in lines] == [(a, "done"), (b, "oom")]


def test_wait_blocks_until_a_run_ends_in_another_process(home, store):
    run = store.add_run(CONFIG)
    proc = subprocess.Popen([sys.executable, "-m", "rngdctl", "--home", str(home.path), "wait",
                             str(run), "--interval", "0.1", "--no-daemon-ok"],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        out, _ = proc.communicate(timeout=1.0)
        raise AssertionError(f"wait returned before the run ended: {out!r}")
    except subprocess.TimeoutExpired:
        pass
    store.finish_run(run, "cancelled", reason="cancelled while queued")
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == 1, err
    assert out == f"run {run}: cancelled: cancelled while queued\n"


def test_wait_with_a_timeout_names_the_runs_left_and_exits_1(rngdctl, store):
    run = store.add_run(CONFIG)
    code, out, err = rngdctl("wait", str(run), "--timeout", "0.2", "--interval", "0.1",
                             "--no-daemon-ok")
    assert (code, out) == (1, "")
    assert err == f"stopped waiting after 0.2 s: run {run} not ended\n"


def test_wait_for_an_unknown_run_is_one_line_and_exit_2(rngdctl):
    code, out, err = rngdctl("wait", "nope")
    assert (code, out, err) == (2, "", "Error: no run 'nope'\n")


# === no daemon, and progress =================================================


def test_with_no_daemon_for_the_grace_period_wait_gives_up_naming_the_runs(store):
    run = store.add_run(CONFIG)
    t, said = FakeTime(), []

    with pytest.raises(NoDaemon) as raised:
        wait_for_runs(store, [run], interval=2.0, daemon=lambda: Liveness(NEVER), grace=10.0,
                      say=said.append, clock=t.clock, sleep=t.sleep)

    assert raised.value.exit_code == 3
    assert str(raised.value) == (f"no daemon running (none has run on this home): run {run} "
                                 f"would never end; start `rngdctl daemon`, or pass "
                                 f"--no-daemon-ok to wait anyway")
    assert t.now == 10.0  # the grace, in polls of 2 s
    assert said == [(f"no daemon running (none has run on this home): run {run} cannot end "
                     f"without one; waiting 10 s for a daemon to start")]


def test_a_daemon_that_starts_within_the_grace_period_is_waited_for(store):
    run = store.add_run(CONFIG)
    t = FakeTime([lambda: None, lambda: store.finish_run(run, "done")])
    states = iter([Liveness(NEVER), Liveness(ALIVE), Liveness(ALIVE)])

    ended, pending = wait_for_runs(store, [run], interval=4.0, daemon=lambda: next(states),
                                   grace=10.0, clock=t.clock, sleep=t.sleep)

    assert (ended, pending) == ({run: "done"}, [])


def test_runs_that_ended_need_no_daemon(store):
    run = store.add_run(CONFIG)
    store.finish_run(run, "done")

    ended, _ = wait_for_runs(store, [run], daemon=lambda: Liveness(NEVER), grace=10.0)

    assert ended == {run: "done"}


def test_a_progress_line_says_where_each_run_stands_every_minute(store):
    running, queued = store.add_run({**CONFIG, "steps": 500}), store.add_run(CONFIG)
    store.claim_for_launch(running, launcher="local")
    store.update_run(running, status="running")
    store.add_steps(running, [records.Step(config_label="main", step=n, loss=1.0, step_s=0.1,
                                           tokens=8, lr=1e-3) for n in range(1, 121)])
    t, said = FakeTime(), []

    wait_for_runs(store, [running, queued], timeout=150.0, interval=10.0, say=said.append,
                  progress_every=60.0, clock=t.clock, sleep=t.sleep)

    line = f"run {running} running, step 120/500; run {queued} queued"
    assert said == [f"waited 60 s: {line}", f"waited 2 m: {line}"]


def test_wait_with_no_daemon_running_exits_3_in_one_line(rngdctl, store):
    run = store.add_run(CONFIG)
    code, out, err = rngdctl("wait", str(run), "--interval", "0.5", timeout=120)
    assert (code, out) == (3, "")
    assert err.splitlines()[-1] == (f"Error: no daemon running (none has run on this home): "
                                    f"run {run} would never end; start `rngdctl daemon`, or "
                                    f"pass --no-daemon-ok to wait anyway")
    assert len(err.splitlines()) == 2  # the notice as it starts waiting, and the verdict
