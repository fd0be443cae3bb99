"""`rngdctl wait RUN...`: one line per run as it ends; exit 0 only if all are done."""

from __future__ import annotations

import json
import subprocess
import sys

from daemon.scheduling.queueing import wait_for_runs
from tests.conftest import REPO

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
                             str(run), "--interval", "0.1"], stdout=subprocess.PIPE,
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
    code, out, err = rngdctl("wait", str(run), "--timeout", "0.2", "--interval", "0.1")
    assert (code, out) == (1, "")
    assert err == f"stopped waiting after 0.2 s: run {run} not ended\n"


def test_wait_for_an_unknown_run_is_one_line_and_exit_2(rngdctl):
    code, out, err = rngdctl("wait", "nope")
    assert (code, out, err) == (2, "", "Error: no run 'nope'\n")
