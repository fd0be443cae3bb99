"""rngdctl events: every stored event, daemon-level ones included, filtered and followed."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from datetime import datetime

import pytest

from rngdctl.commands.events import parse_since

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def logged(store):
    """Daemon-level and run events, an hour apart, as the daemon stores them."""
    from daemon.run.spec import validate

    run = store.add_run(validate({"cards": 1, "resident": 4, "steps": 5}), name="first")
    now = time.time()
    store.add_event(None, "daemon", "daemon started (pid 11, launcher k8s)", now=now - 7200)
    store.add_event(None, "k8s", "gates.consecutive raised to 2 for the k8s launcher",
                    now=now - 7199)
    store.add_event(run, "requeue", "image not pulled; retrying", now=now - 3600)
    store.add_event(None, "error", "tick failed: OSError('disk')\nsecond line", now=now - 60)
    return run


def test_events_lists_every_stored_event_daemon_level_ones_included(logged, rngdctl):
    code, out, err = rngdctl("events")
    assert code == 0, err
    lines = out.splitlines()
    kinds = [p[4] if p[2] == "run" else p[3] for p in (line.split() for line in lines)]
    assert kinds == ["daemon", "k8s", "requeue", "error"]
    assert lines[0].split()[2] == "–" and f"run {logged}" in lines[2]
    assert lines[3].endswith("tick failed: OSError('disk')")  # the first line only


def test_events_filters_by_run_and_by_since(logged, rngdctl):
    code, out, _ = rngdctl("events", "--run", "first", "--json")
    assert code == 0
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["requeue"]
    code, out, _ = rngdctl("events", "--since", "90m", "--json")
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["requeue", "error"]
    code, out, _ = rngdctl("events", "--since", "5m", "--run", str(logged))
    assert code == 0 and out == ""


def test_a_bad_since_is_one_line_and_exit_2(logged, rngdctl):
    code, out, err = rngdctl("events", "--since", "yesterday-ish")
    assert code == 2 and out == ""
    assert err.startswith("Error: --since 'yesterday-ish'") and len(err.splitlines()) == 1


def test_since_reads_durations_clock_times_dates_and_epoch_seconds():
    now = datetime(2026, 12, 1, 14, 30).timestamp()
    assert parse_since("10m", now) == now - 600
    assert parse_since("2h", now) == now - 7200
    assert parse_since("14:02", now) == datetime(2026, 12, 1, 14, 2).timestamp()
    assert parse_since("23:50", now) == datetime(2026, 11, 30, 23, 50).timestamp()
    assert parse_since("2026-12-01 09:15", now) == datetime(2026, 12, 1, 9, 15).timestamp()
    assert parse_since("1764547200", now) == 1764547200.0
    with pytest.raises(ValueError):
        parse_since("soon", now)


def _line(proc, timeout: float = 30.0) -> str:
    """The follower's next line, failing (not hanging) when none comes."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the follower printed nothing"
    return proc.stdout.readline()


def test_follow_prints_events_stored_after_it_started(logged, home, store):
    proc = subprocess.Popen(
        [sys.executable, "-m", "rngdctl", "--home", str(home.path), "events", "--follow",
         "--json", "--since", "2m"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert json.loads(_line(proc))["kind"] == "error"  # the stored one
        store.add_event(None, "daemon", "daemon stopped: SIGTERM")
        new = json.loads(_line(proc))
        assert (new["kind"], new["message"], new["run"]) == (
            "daemon", "daemon stopped: SIGTERM", None)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == ""  # Ctrl-C ends a follow; it is not an error
