"""Honest state when the daemon is down: after kill -9, nothing reads as current.

``runs``, ``show``, ``gates`` and the TUI say that no daemon runs and since
when, and mark stored state (an active status, a gate verdict) as of then.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from procs import wait_for

from daemon.scheduling import liveness

DEVICE = {"name": "device_idle", "reading": 1, "threshold": "0 holders", "verdict": "fail",
          "detail": "pid 6691 python bench.py (kim) holds /dev/rngd/npu0pe0-3"}


# === the rule ================================================================


@pytest.mark.parametrize("heartbeat_age, pid_alive, state", [
    (1.0, True, "alive"),
    (14.0, True, "alive"),  # three ticks of 5 s: not yet
    (16.0, True, "down"),  # more than three ticks without a heartbeat
    (1.0, False, "down"),  # fresh heartbeat, but its pid is gone: killed just now
])
def test_a_daemon_is_down_when_its_heartbeat_is_three_ticks_old_or_its_pid_is_gone(
        heartbeat_age, pid_alive, state):
    row = {"pid": 6691, "home": "/h", "started": 0.0, "heartbeat": 100.0 - heartbeat_age,
           "stopped": None}
    live = liveness.read(row, 5.0, now=100.0, home="/h", pid_alive=lambda pid: pid_alive)
    assert live.state == state
    if state == "down":
        assert live.since == row["heartbeat"] and live.as_of == row["heartbeat"]
        assert live.summary(100.0).startswith("no daemon running since ")


def test_a_pid_is_not_probed_for_a_daemon_of_another_home():
    row = {"pid": 6691, "home": "/elsewhere", "started": 0.0, "heartbeat": 99.0, "stopped": None}
    live = liveness.read(row, 5.0, now=100.0, home="/h", pid_alive=lambda pid: False)
    assert live.state == "alive"


def test_a_stopped_or_absent_daemon_is_not_running():
    stopped = {"pid": 1, "home": "/h", "started": 0.0, "heartbeat": 99.0, "stopped": 99.5,
               "stop_reason": "SIGTERM"}
    assert liveness.read(stopped, 5.0, now=100.0).summary(100.0).endswith("(it stopped: SIGTERM)")
    assert liveness.read(None, 5.0, now=100.0).state == "never"


# === the real daemon, killed =================================================


def test_after_kill_9_runs_show_and_gates_say_no_daemon_runs_and_since_when(home, store,
                                                                            rngdctl):
    held = store.add_run({"cards": 1, "resident": 0, "steps": 5, "model": "tiny-llama"})
    store.set_held(held, True)  # the daemon idles: nothing to launch
    daemon = subprocess.Popen(
        [sys.executable, "-m", "rngdctl", "--home", str(home.path), "daemon", "--tick", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (store.daemon_state() or {}).get("pid") == daemon.pid)
        assert liveness.for_home(home, store).running
    finally:
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=30)
    heartbeat = store.daemon_state()["heartbeat"]
    # What the daemon was following when it died (set here: the kill is what matters).
    running = store.add_run({"cards": 1, "resident": 0, "steps": 5, "model": "tiny-llama"})
    store.update_run(running, status="running", pid=daemon.pid)

    code, out, _ = rngdctl("runs")
    first = out.splitlines()[0]
    assert code == 0
    assert first.startswith(f"no daemon running since {liveness.when(heartbeat)}")
    assert f"pid {daemon.pid} is gone" in first
    assert [line.split()[2] for line in out.splitlines()[2:]] == ["running*", "queued"]

    _, out, _ = rngdctl("runs", "--json")
    as_of = {r["id"]: r["as_of"] for r in json.loads(out)}
    assert as_of == {running: heartbeat, held: None}

    _, out, _ = rngdctl("show", str(running))
    assert f"no daemon running since {liveness.when(heartbeat)}" in out
    assert "this status is as of then" in out
    _, out, _ = rngdctl("show", str(running), "--json")
    assert json.loads(out)["daemon"]["state"] == "down"

    code, out, _ = rngdctl("gates")
    assert code == 1  # one_at_a_time blocks: a run is (as stored) running
    assert out.splitlines()[-1].endswith("nothing launches until a daemon starts")


def test_show_of_a_blocked_run_stops_the_clock_at_the_last_check_when_no_daemon_runs(
        home, store, rngdctl):
    now = time.time()
    run = store.add_run({"cards": 1, "resident": 2, "steps": 12, "model": "tiny-llama"})
    for minutes_ago in (21, 14):
        store.add_gate_check(run, [DEVICE], False, now=now - 60 * minutes_ago)
    # This process plays the daemon: alive, but it has not ticked for 14 minutes.
    store.daemon_started(pid=os.getpid(), launcher="local", home=str(home.path),
                         now=now - 3600)
    store.daemon_heartbeat(now=now - 60 * 14)
    _, out, _ = rngdctl("show", str(run))
    last = liveness.when(now - 60 * 14)
    assert f"blocked 7 m as of {last}: device_idle: pid 6691" in out
    assert f"pid {os.getpid()} exists but does not tick" in out
    assert f"gate checks (stored; as of {last}, not current):" in out


def test_gates_exits_0_when_every_gate_passes_and_1_when_one_blocks(store, rngdctl):
    assert rngdctl("gates")[0] == 0
    assert rngdctl("gates", "--json")[0] == 0
    run = store.add_run({"cards": 1, "resident": 0, "steps": 5})
    store.update_run(run, status="running")
    code, out, _ = rngdctl("gates", "--json")
    assert (code, json.loads(out)["passed"]) == (1, False)
    assert rngdctl("gates")[0] == 1


# === the TUI =================================================================


def test_the_tui_header_and_gates_panel_say_no_daemon_runs_after_a_kill(home, store):
    from rngdctl.tui.data import ViewSource
    from rngdctl.tui.widgets.daemon_bar import daemon_text
    from rngdctl.tui.widgets.gates import blocked_text

    now = time.time()
    run = store.add_run({"cards": 1, "resident": 2, "steps": 12, "model": "tiny-llama"})
    store.add_gate_check(run, [DEVICE], False, now=now - 600)
    store.add_gate_check(run, [DEVICE], False, now=now - 420)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.daemon_started(pid=dead.pid, launcher="local", home=str(home.path), now=now - 3600)
    store.daemon_heartbeat(now=now - 420)

    snapshot = ViewSource(store, home=home.path, clock=lambda: now).build()
    header = daemon_text(snapshot.daemon).plain
    assert header.startswith("✗ no daemon running · since ")
    assert f"pid {dead.pid} gone" in header and "heartbeat 7 m ago" in header
    gates = blocked_text(snapshot.gates, now).plain
    assert "blocked 3 m" in gates  # from the first failing check to the last, not to now
    assert "as of " in gates and "no daemon running" in gates
