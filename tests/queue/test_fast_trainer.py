"""A trainer that writes faster than the daemon ingests (issue 36, item 7).

Each follow reads a bounded part of the log (daemon/launchers/local.py,
READ_BUDGET_BYTES and READ_BUDGET_S), so every tick ends and acts on a cancel;
the rest is read in the next ticks, each line once, and the run's end is
stamped when the trainer ended, not when its log was read to the end.
"""

from __future__ import annotations

import sys
import threading
import time

from daemon.home import parse_config
from daemon.store import Store
from trainer import records

TICK = 0.5
RATE = 20_000  # lines a second
#: The stand-in stops by itself after this long: a daemon that never acts on the cancel
#: then sees a run that ended `done`.
WRITES_FOR_S = 20.0

STAND_IN = """\
#!{python}
# A trainer stand-in: step records at RATE lines a second on stdout (the run's log), until
# SIGTERM (its arrival time written to {signalled}) or WRITES_FOR_S.
import os, signal, sys, time
from trainer import records

def stop(signum, frame):
    with open({signalled!r}, "w") as f:
        f.write(repr(time.time()))
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)

signal.signal(signal.SIGTERM, stop)
out = sys.stdout
out.write(records.dumps(records.Start(config_label="main", time=time.time(),
                                      config={{"backend": "cpu"}})) + "\\n")
start, n = time.monotonic(), 0
while time.monotonic() - start < {seconds}:
    due = int((time.monotonic() - start) * {rate})
    while n < due:
        n += 1
        out.write(records.dumps(records.Step(config_label="main", step=n, loss=1.0,
                                             step_s=1e-4, tokens=128, lr=1e-3, phases={{}},
                                             time=time.time())) + "\\n")
    out.flush()
    time.sleep(0.005)
"""


def _stand_in(tmp_path):
    path = tmp_path / "fast-trainer"
    path.write_text(STAND_IN.format(python=sys.executable, signalled=str(tmp_path / "sigterm"),
                                    rate=RATE, seconds=WRITES_FOR_S))
    path.chmod(0o755)
    return path


def _steps_in_log(path) -> int:
    complete = path.read_bytes().rsplit(b"\n", 1)[0].decode().splitlines()
    return sum(isinstance(records.parse_line(line), records.Step) for line in complete)


def test_a_trainer_writing_20000_lines_a_second_is_cancelled_within_two_ticks(
        home, store, tmp_path, start_daemon):
    from daemon.launchers.local import LocalLauncher
    from daemon.probes.host_reading import HostReading
    from daemon.run.ingest import Ingest

    config = parse_config(f"[daemon]\ntick = {TICK}\n")
    launcher = LocalLauncher(home=home, store=store, config=config, ingest=Ingest(store),
                             python=str(_stand_in(tmp_path)))
    daemon = start_daemon(config, launcher, lambda: HostReading(0.0, (0.1,) * 3, (), True))
    run_id = store.add_run({"cards": 1, "resident": 0, "steps": 10**6, "backend": "cpu",
                            "model": "tiny-llama", "data": "synthetic", "seq_len": 32,
                            "accum": 1, "lr": 1e-5, "seed": 0})
    requested = threading.Event()

    def request_cancel():  # from another thread: a tick that never ends cannot stop it
        with Store(store.path) as other:
            other.request_cancel(run_id)
        requested.set()

    timer = threading.Timer(1.5, request_cancel)
    ticks_after_request, cancel_acted_at = 0, None
    deadline = time.monotonic() + WRITES_FOR_S + 60
    timer.start()
    try:
        while store.run(run_id)["status"] not in ("done", "failed", "oom", "cancelled"):
            assert time.monotonic() < deadline, store.events(run_id=run_id)
            began = time.monotonic()
            after = requested.is_set()
            daemon.tick()
            ticks_after_request += after
            if cancel_acted_at is None and store.events(run_id=run_id, kinds=["cancel"])[1:]:
                cancel_acted_at = ticks_after_request  # the launcher's SIGTERM event
            time.sleep(max(0.0, TICK - (time.monotonic() - began)))
    finally:
        timer.cancel()

    run = store.run(run_id)
    assert run["status"] == "cancelled"
    assert cancel_acted_at is not None and cancel_acted_at <= 2
    signalled = float((tmp_path / "sigterm").read_text())
    # Stamped when it ended: after the SIGTERM, within a tick and one read of its seeing it.
    assert signalled <= run["ended"] <= signalled + 2 * TICK + 1.0
    written = _steps_in_log(home.run_dir(run_id) / "output.log")
    assert written > RATE  # it wrote for more than a second
    assert [s["step"] for s in store.steps(run_id)] == list(range(1, written + 1))
