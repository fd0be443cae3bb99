"""Notifications: a real command, run without a shell, at start, end and gates cleared.

Each notifier here is a real subprocess: a small script that appends its argv and
its RNGDCTL_* environment to a file, one that hangs (with a child of its own), one
that crashes, and one that does not exist.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
import time

import pytest

from daemon.home import parse_config
from daemon.launchers.base import Outcome
from daemon.probes.host_reading import HostReading
from tests.queue.conftest import ScriptedLauncher

CONFIG = {"cards": 1, "resident": 0, "steps": 5}
RECORDER = """\
import json, os, sys
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"argv": sys.argv[2:], "env": {
        k: v for k, v in os.environ.items() if k.startswith("RNGDCTL_")}}) + "\\n")
"""
HANGER = """\
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
time.sleep(120)
"""
WAITER = """\
import os, sys, time
from pathlib import Path
Path(sys.argv[1]).write_text(str(os.getpid()))
deadline = time.monotonic() + 120
while not Path(sys.argv[2]).exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""
CRASHER = "import sys; print('boom: no display', file=sys.stderr); sys.exit(3)\n"


def script(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.fixture
def recorder(tmp_path):
    """(command text, read()): the command appends one JSON line per call to calls.jsonl."""
    out = tmp_path / "calls.jsonl"
    command = shlex.join([sys.executable, script(tmp_path, "recorder.py", RECORDER), str(out),
                          "{event}", "{id}", "{status}", "{name}"])

    def read():
        if not out.exists():
            return []
        return [json.loads(line) for line in out.read_text().splitlines()]

    return command, read


class Host:
    """The host the gates see: ``load`` is what the probe reads."""

    def __init__(self):
        self.load = 0.0

    def read(self):
        return HostReading(0.0, (self.load, self.load, self.load), (), True)


@pytest.fixture
def make_daemon(start_daemon):
    def make(notify_toml: str = "", write_note=None, host=None):
        return start_daemon(parse_config("[notify]\n" + notify_toml), ScriptedLauncher(),
                            (host or Host()).read, write_note=write_note)

    return make


def alive(pid: int) -> bool:
    """Running, not gone nor a zombie waiting for a reaper (init in a container may not reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def notices(store, run_id=None):
    return [(e["data"]["on"], e["data"]["status"]) for e in store.events(run_id=run_id,
                                                                           kinds=["notify"])]


def failures(store, run_id):
    return [e["message"] for e in store.events(run_id=run_id, kinds=["notify_failed"])]


def test_a_runs_notifier_is_called_at_start_and_finish_with_id_status_and_name(
        make_daemon, store, recorder):
    command, calls = recorder
    daemon = make_daemon()
    run = store.add_run(CONFIG, name="r200", notify=command)

    assert daemon.tick(now=1.0).launched == run
    daemon.launcher.outcomes[run] = Outcome("done")
    daemon.tick(now=2.0)
    assert daemon.notifications.drain(timeout=60)

    got = calls()
    assert [c["argv"] for c in got] == [["start", str(run), "running", "r200"],
                                        ["finish", str(run), "done", "r200"]]
    env = got[1]["env"]
    assert (env["RNGDCTL_EVENT"], env["RNGDCTL_RUN_ID"], env["RNGDCTL_STATUS"],
            env["RNGDCTL_NAME"]) == ("finish", str(run), "done", "r200")
    assert env["RNGDCTL_MEDIAN_STEP_S"] == "" and env["RNGDCTL_NOTE"] == ""  # no steps, no note
    assert notices(store, run) == [("start", "running"), ("finish", "done")]
    assert failures(store, run) == []


def test_a_failure_tells_the_notifier_the_first_line_of_the_reason(make_daemon, store,
                                                                    recorder):
    command, calls = recorder
    daemon = make_daemon(f"command = {json.dumps(command)}\n")  # the config's default
    run = store.add_run(CONFIG)
    daemon.tick(now=1.0)
    daemon.launcher.outcomes[run] = Outcome("oom", "out of memory in backward\nlog tail")
    daemon.tick(now=2.0)
    assert daemon.notifications.drain(timeout=60)

    last = calls()[-1]
    assert last["argv"] == ["failure", str(run), "oom", ""]
    assert last["env"]["RNGDCTL_REASON"] == "out of memory in backward"
    [event] = [e for e in store.events(run_id=run, kinds=["notify"])
               if e["data"]["on"] == "failure"]
    assert event["message"] == f"run {run} oom: out of memory in backward"


def test_the_median_step_time_and_the_note_reach_the_notifier_at_the_end(
        make_daemon, home, store, recorder):
    from daemon.run.ingest import Ingest
    from daemon.run.spec import validate
    from rngdctl.commands.daemon import _note_writer
    from trainer import records

    command, calls = recorder
    config = parse_config("")
    daemon = make_daemon(write_note=_note_writer(config))
    config_10 = validate({"cards": 1, "resident": 0, "steps": 10, "name": "noted"})
    run = store.add_run(config_10, name="noted", notify=command)
    daemon.tick(now=1.0)
    Ingest(store).feed(run, [records.dumps(r) for r in (
        records.Start(config_label="main", config=config_10, run_id=str(run), time=1000.0),
        *[records.Step(config_label="main", step=s, loss=2.0, step_s=1.5, tokens=1024, lr=1e-5,
                       time=1000.0 + s) for s in range(1, 11)],
        records.End(status="ok", time=1100.0))])
    daemon.launcher.outcomes[run] = Outcome("done")
    daemon.tick(now=2.0)
    assert daemon.notifications.drain(timeout=120)

    env = calls()[-1]["env"]
    assert float(env["RNGDCTL_MEDIAN_STEP_S"]) == 1.5  # every step took 1.5 s
    note = env["RNGDCTL_NOTE"]
    assert note.startswith(str(home.path / "runs" / str(run))) and note.endswith(".md")
    with open(note) as f:
        text = f.read()
    assert "noted" in text and "10/10 steps" in text


def test_gates_cleared_is_told_only_after_a_block_longer_than_blocked_minutes(
        make_daemon, store, recorder):
    command, calls = recorder
    host = Host()
    daemon = make_daemon(f"command = {json.dumps(command)}\nblocked_minutes = 1.0\n", host=host)
    short = store.add_run(CONFIG)
    host.load = 500.0  # the load gate blocks
    daemon.tick(now=0.0)
    host.load = 0.0
    assert daemon.tick(now=30.0).launched == short  # blocked 30 s: no notice
    daemon.launcher.outcomes[short] = Outcome("done")
    daemon.tick(now=31.0)

    long = store.add_run(CONFIG)
    host.load = 500.0
    daemon.tick(now=40.0)
    daemon.tick(now=80.0)
    host.load = 0.0
    assert daemon.tick(now=110.0).launched == long  # blocked 70 s > 60 s
    assert daemon.notifications.drain(timeout=60)

    assert ("gates_cleared", "queued") not in notices(store, short)
    assert ("gates_cleared", "queued") in notices(store, long)
    cleared = [c for c in calls() if c["argv"][0] == "gates_cleared"]
    assert [c["argv"][1] for c in cleared] == [str(long)]
    assert float(cleared[0]["env"]["RNGDCTL_BLOCKED_S"]) == 70.0


def test_a_notifier_still_running_never_holds_up_the_queue(make_daemon, store, tmp_path):
    pids, release = tmp_path / "pids", tmp_path / "release"
    command = shlex.join([sys.executable, script(tmp_path, "wait.py", WAITER), str(pids),
                          str(release)])
    daemon = make_daemon(f'command = {json.dumps(command)}\ntimeout = 120.0\non = ["start"]\n')
    first, second = store.add_run(CONFIG), store.add_run(CONFIG)

    assert daemon.tick(now=1.0).launched == first
    deadline = time.monotonic() + 60
    while not pids.exists():  # the notifier for the start of `first` is running
        assert time.monotonic() < deadline
        time.sleep(0.05)
    daemon.launcher.outcomes[first] = Outcome("done")
    assert daemon.tick(now=2.0).launched == second  # the queue went on...
    assert alive(int(pids.read_text()))  # ... while that notifier still ran
    release.write_text("go")
    assert daemon.notifications.drain(timeout=120)
    assert failures(store, first) == failures(store, second) == []


def test_a_hanging_notifier_is_killed_with_its_children_at_the_timeout(make_daemon, store,
                                                                       tmp_path):
    pids = tmp_path / "pids"
    command = shlex.join([sys.executable, script(tmp_path, "hang.py", HANGER), str(pids)])
    daemon = make_daemon(f'command = {json.dumps(command)}\ntimeout = 3.0\non = ["start"]\n')
    run = store.add_run(CONFIG)

    assert daemon.tick(now=1.0).launched == run
    assert daemon.notifications.drain(timeout=120)

    assert failures(store, run) == [
        f"notifier {command} (start) failed: timed out after 3 s (killed)"]
    for pid in map(int, pids.read_text().split()):  # the notifier and the child it started
        assert not alive(pid)


def test_a_missing_notifier_is_an_event_and_the_run_ends_as_it_would(make_daemon, store):
    daemon = make_daemon()
    run = store.add_run(CONFIG, notify="/nonexistent/rngdctl-notifier {id}")
    daemon.tick(now=1.0)
    daemon.launcher.outcomes[run] = Outcome("done")
    daemon.tick(now=2.0)
    assert daemon.notifications.drain(timeout=60)

    assert store.run(run)["status"] == "done"
    assert failures(store, run) == [
        f"notifier /nonexistent/rngdctl-notifier {run} ({on}) failed: "
        "/nonexistent/rngdctl-notifier: command not found" for on in ("start", "finish")]


def test_a_crashing_notifier_is_an_event_with_its_exit_code_and_last_stderr_line(
        make_daemon, store, tmp_path):
    daemon = make_daemon()
    crasher = shlex.join([sys.executable, script(tmp_path, "crash.py", CRASHER)])
    run = store.add_run(CONFIG, notify=crasher)
    daemon.tick(now=1.0)
    assert daemon.notifications.drain(timeout=60)

    [event] = store.events(run_id=run, kinds=["notify_failed"])
    assert event["data"]["why"] == "exit code 3: boom: no display"
    assert event["data"]["on"] == "start"


def test_notify_events_are_stored_without_a_notifier_and_an_empty_one_turns_the_default_off(
        make_daemon, store, recorder):
    command, calls = recorder
    daemon = make_daemon(f"command = {json.dumps(command)}\n")
    quiet = store.add_run(CONFIG, notify="")
    daemon.tick(now=1.0)
    daemon.launcher.outcomes[quiet] = Outcome("failed", "exit code 1")
    daemon.tick(now=2.0)
    assert daemon.notifications.drain(timeout=60)

    assert calls() == []
    assert notices(store, quiet) == [("start", "running"), ("failure", "failed")]
    assert all(e["data"]["command"] is None for e in store.events(run_id=quiet,
                                                                  kinds=["notify"]))


def test_a_dependent_cancelled_by_its_failed_after_run_is_told_as_its_end(make_daemon, store,
                                                                          recorder):
    command, calls = recorder
    daemon = make_daemon()
    first = store.add_run(CONFIG)
    second = store.add_run(CONFIG, after=first, notify=command)
    daemon.tick(now=1.0)
    daemon.launcher.outcomes[first] = Outcome("failed", "exit code 1")
    daemon.tick(now=2.0)
    assert daemon.notifications.drain(timeout=60)

    assert [c["argv"][:3] for c in calls()] == [["finish", str(second), "cancelled"]]


def test_submit_refuses_a_notifier_it_cannot_split_or_with_an_unknown_placeholder(
        rngdctl, store):
    unsplittable = rngdctl("submit", "--cards", "1", "--resident", "0", "--notify", "say 'hi")
    unknown = rngdctl("submit", "--cards", "1", "--resident", "0", "--notify", "say {run}")

    for code, out, err in (unsplittable, unknown):
        assert (code, out, len(err.splitlines())) == (2, "", 1)
    assert unsplittable[2].startswith("Error: --notify: cannot split")
    assert unknown[2].startswith("Error: --notify: unknown placeholder {run} in '{run}'")
    assert store.runs() == []


def test_submit_keeps_the_notifier_and_clone_copies_it(cli, store):
    result = cli("submit", "--cards", "1", "--resident", "0", "--notify", "notify-send {id}")
    run = int(result.output)
    clone = int(cli("clone", str(run)).output)

    assert store.run(run)["notify"] == "notify-send {id}"
    assert store.run(clone)["notify"] == "notify-send {id}"


@pytest.mark.parametrize("toml, words", [
    ('command = "say \'hi"', "cannot split"),
    ('command = "say {when}"', "unknown placeholder {when}"),
    ("timeout = 0", "timeout must be > 0"),
    ('on = ["finish", "lunch"]', "[notify] on takes"),
])
def test_a_bad_notify_section_is_one_line_naming_the_key(toml, words):
    from daemon.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_config("[notify]\n" + toml + "\n")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_moments_left_out_of_on_store_their_event_but_call_nobody(make_daemon, store,
                                                                 recorder):
    command, calls = recorder
    daemon = make_daemon(f'command = {json.dumps(command)}\non = ["failure"]\n')
    run = store.add_run(CONFIG)
    daemon.tick(now=1.0)
    daemon.launcher.outcomes[run] = Outcome("done")
    daemon.tick(now=2.0)
    assert daemon.notifications.drain(timeout=60)

    assert calls() == []
    assert notices(store, run) == [("start", "running"), ("finish", "done")]


@pytest.mark.slow
def test_the_real_daemon_notifies_a_real_runs_start_and_end_before_it_exits(
        home, rngdctl, recorder):
    command, calls = recorder
    code, out, err = rngdctl("submit", "--cards", "1", "--resident", "2", "--seq-len", "32",
                             "--accum", "1", "--model", "tiny-llama", "--steps", "8",
                             "--notify", command)
    assert code == 0, err
    run = int(out)
    daemon = subprocess.Popen([sys.executable, "-m", "rngdctl", "--home", str(home.path),
                               "daemon", "--tick", "0.2", "--exit-when-idle"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert daemon.wait(timeout=300) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()

    got = calls()  # the daemon waited for its notifier before it exited
    assert [c["argv"][:3] for c in got] == [["start", str(run), "running"],
                                            ["finish", str(run), "done"]]
    env = got[1]["env"]
    assert float(env["RNGDCTL_MEDIAN_STEP_S"]) > 0
    with open(env["RNGDCTL_NOTE"]) as f:
        assert "8/8 steps" in f.read()


# === a notifier's output and its session (issue 36, items 6 and 10) ================


def test_a_notifier_writing_a_flood_of_stderr_keeps_the_daemons_memory_bounded():
    # 256 MB of NULs on stderr, then exit 1: read in a fresh interpreter, whose peak
    # resident memory (VmHWM: its own, not the one getrusage carries over from the parent
    # across exec; the notifier's left out) must stay far below what it wrote.
    probe = textwrap.dedent("""\
        import os
        from daemon.scheduling.notify import call
        why = call(["sh", "-c", "head -c 268435456 /dev/zero >&2; printf 'bad\\\\000 end\\\\033[31m\\\\n' >&2; exit 1"],
                   dict(os.environ), 60.0)
        print(repr(why))
        with open("/proc/self/status") as f:
            print([line.split()[1] for line in f if line.startswith("VmHWM:")][0])  # kB
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()

    assert int(out[-1]) < 100_000  # kB: the interpreter and a 4 kB tail, not 256 MB
    assert out[0] == repr("exit code 1: bad end[31m")  # no NUL, no escape character


def test_a_notifiers_nul_and_control_characters_never_reach_its_event(make_daemon, store,
                                                                       tmp_path):
    command = ["sh", "-c", r"printf 'no\000 dis\033play\r\n' >&2; exit 2"]
    daemon = make_daemon(f'command = {json.dumps(command)}\non = ["start"]\n')
    run = store.add_run(CONFIG)

    daemon.tick(now=1.0)
    assert daemon.notifications.drain(timeout=60)

    [event] = store.events(run_id=run, kinds=["notify_failed"])
    assert event["data"]["why"] == "exit code 2: no display"


@pytest.mark.parametrize("leaves", [
    "setsid sleep 300 >/dev/null 2>&1 & echo $! > {pid}; sleep 300",  # then hangs
    "setsid sleep 300 >/dev/null 2>&1 & echo $! > {pid}",  # then exits at once
    '(setsid sh -c "sleep 300 & echo \\$! > {pid}; wait" &); sleep 300',  # a double fork
])
def test_a_setsid_grandchild_of_a_notifier_is_killed_at_the_timeout(tmp_path, leaves):
    from daemon.scheduling.notify import call

    pid_file = tmp_path / "pid"
    began = time.monotonic()
    call(["sh", "-c", leaves.format(pid=pid_file)], {"PATH": "/usr/bin:/bin"}, 1.0)

    assert time.monotonic() - began < 1.0 + 5.0
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 2.0
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
