"""A run's end when the store cannot be written (issue 36, item 15): a full disk under
HOME. ``RNGDCTL_FAULT=store_full`` (daemon/faults.py) has the store refuse a run's end
with SQLite's own full-disk error for as long as it is set."""

from __future__ import annotations

import sys
import time

from daemon import faults
from daemon.home import parse_config
from daemon.launchers.base import Outcome
from daemon.probes.host_reading import HostReading
from tests.queue.conftest import ScriptedLauncher

IDLE = HostReading(0.0, (0.1, 0.1, 0.1), (), True)
CONFIG = {"cards": 1, "resident": 0, "steps": 5, "backend": "cpu", "model": "tiny-llama",
          "data": "synthetic", "seq_len": 32, "accum": 1, "lr": 1e-5, "seed": 0}
#: A failure's reason as the local launcher gives it: the error and the log's last lines.
REASON = "RuntimeError: the loss is NaN at step 3\n" + "\n".join(
    f"  File \"trainer/train.py\", line {n}, in step" for n in range(20))


def test_a_failed_runs_reason_is_held_while_the_disk_is_full_and_stored_when_it_frees(
        store, start_daemon, monkeypatch):
    launcher = ScriptedLauncher()
    daemon = start_daemon(parse_config(""), launcher, lambda: IDLE)
    run_id = store.add_run(CONFIG)
    daemon.tick(now=1.0)
    launcher.outcomes[run_id] = Outcome("failed", REASON, exit_code=1)
    monkeypatch.setenv(faults.ENV, faults.STORE_FULL)

    daemon.tick(now=2.0)  # it ends; the store refuses its end
    daemon.tick(now=3.0)  # still full: held, and the run is not followed again
    assert store.run(run_id)["status"] == "launching"  # as the scripted launcher left it
    monkeypatch.delenv(faults.ENV)
    daemon.tick(now=4.0)  # the disk freed

    run = store.run(run_id)
    assert (run["status"], run["exit_reason"], run["exit_code"]) == ("failed", REASON, 1)
    assert run["ended"] == 2.0  # when it ended, not when the store took it
    assert [e["time"] for e in store.events(run_id=run_id, kinds=["finished"])] == [2.0]


STAND_IN = """\
#!{python}
# A trainer that fails: its end record with the error, a traceback on stderr, exit 1.
import sys, time
from trainer import records
print(records.dumps(records.End(status="error", error="RuntimeError: boom at step 3",
                                time=time.time())), flush=True)
for n in range(5):
    print(f'  File "trainer/train.py", line {{n}}, in step', file=sys.stderr, flush=True)
sys.exit(1)
"""


def test_a_failed_runs_reason_the_disk_refused_is_stored_by_the_next_daemon(
        home, store, tmp_path, start_daemon, monkeypatch):
    from daemon.launchers.local import LocalLauncher
    from daemon.run.ingest import Ingest

    python = tmp_path / "failing-trainer"
    python.write_text(STAND_IN.format(python=sys.executable))
    python.chmod(0o755)
    config = parse_config("")

    def daemon():
        launcher = LocalLauncher(home=home, store=store, config=config, ingest=Ingest(store),
                                 python=str(python))
        return start_daemon(config, launcher, lambda: IDLE), launcher

    first, launcher = daemon()
    run_id = store.add_run(CONFIG)
    first.tick()
    launcher._children[run_id].wait(timeout=60)
    monkeypatch.setenv(faults.ENV, faults.STORE_FULL)
    first.tick()  # it ended, and the disk is full
    first.close()  # the daemon stops before the disk frees
    assert store.run(run_id)["status"] == "running"
    monkeypatch.delenv(faults.ENV)

    began = time.time()
    daemon()  # the next start judges the run again from its log

    run = store.run(run_id)
    assert run["status"] == "failed"
    assert run["exit_reason"].startswith("RuntimeError: boom at step 3\n")
    assert 'line 4, in step' in run["exit_reason"]
    assert run["ended"] <= began
