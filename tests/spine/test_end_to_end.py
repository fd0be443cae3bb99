"""The real CLI, daemon and trainer on CPU, as a user runs them."""

import json
import os
import signal
import subprocess
import sys

import pytest
from procs import wait_for

from trainer import records

pytestmark = pytest.mark.slow

SHORT = ["--cards", "1", "--resident", "2", "--seq-len", "32", "--accum", "1", "--lr", "1e-3",
         "--model", "tiny-llama"]


def start_daemon(home, *extra):
    return subprocess.Popen(
        [sys.executable, "-m", "rngdctl", "--home", str(home.path), "daemon", "--tick", "0.2",
         "--exit-when-idle", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def main_steps(home, run):
    with home.store() as store:
        return [s["step"] for s in store.steps(run)]


def test_a_submitted_run_is_launched_followed_stored_and_written_up(home, rngdctl, tmp_path):
    code, out, _ = rngdctl("submit", *SHORT, "--steps", "12", "--baseline",
                           "--baseline-steps", "3")
    run = int(out)
    daemon = start_daemon(home)
    assert daemon.wait(timeout=120) == 0
    with home.store() as store:
        assert store.run(run)["status"] == "done"
        assert store.step_counts(run) == {"baseline": 3, "main": 12}
        # The trainer's stdout, its one record stream (no --log), beside its human lines.
        log = home.path / "runs" / str(run) / "output.log"
        logged = [records.parse_line(line) for line in log.read_text().splitlines()]
        assert len([r for r in logged if isinstance(r, records.Step)]) == 15
        assert store.samples(run_id=run), "host load is sampled during the run"
        assert store.run(run)["versions"]["torch"]
    code, out, err = rngdctl("export", str(run), "--out", str(tmp_path / "experiments"))
    assert code == 0, err
    [note] = [p for p in (tmp_path / "experiments").glob("*.md") if p.name != "STATUS.md"]
    assert "12/12 steps" in note.read_text()
    assert f"[{note.name}]({note.name})" in (tmp_path / "experiments/STATUS.md").read_text()


def test_a_daemon_killed_mid_run_is_replaced_and_no_step_is_lost_or_doubled(home, rngdctl):
    _, out, _ = rngdctl("submit", *SHORT, "--steps", "400")
    run = int(out)
    first = start_daemon(home)
    wait_for(lambda: len(main_steps(home, run)) >= 5)
    first.send_signal(signal.SIGKILL)
    first.wait()
    with home.store() as store:
        trainer_pid = store.run(run)["pid"]
    os.kill(trainer_pid, 0)  # the trainer lives on without its daemon
    second = start_daemon(home)
    assert second.wait(timeout=180) == 0, second.stderr.read()
    assert main_steps(home, run) == list(range(1, 401))
    with home.store() as store:
        assert store.run(run)["status"] == "done"
        assert store.events(run_id=run, kinds=["adopt"])


def test_a_second_daemon_exits_1_naming_the_first(home, rngdctl):
    rngdctl("submit", *SHORT, "--steps", "400")
    first = start_daemon(home)
    try:
        lock = home.path / "daemon.lock"
        wait_for(lambda: lock.exists() and lock.read_text().strip() == str(first.pid))
        code, _, err = rngdctl("daemon", "--exit-when-idle")
        assert code == 1
        assert f"another daemon (pid {first.pid})" in err
        assert "Traceback" not in err
    finally:
        first.kill()
        first.wait()


def test_cancel_stops_a_running_trainer(home, rngdctl):
    _, out, _ = rngdctl("submit", *SHORT, "--steps", "100000")
    run = int(out)
    daemon = start_daemon(home)
    wait_for(lambda: len(main_steps(home, run)) >= 2)
    code, msg, _ = rngdctl("cancel", str(run))
    assert code == 0 and "cancel requested" in msg
    assert daemon.wait(timeout=60) == 0
    with home.store() as store:
        assert store.run(run)["status"] == "cancelled"


def test_a_trainer_that_fails_ends_the_run_failed_with_the_logs_tail(home, rngdctl, tmp_path):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    # A config submit accepts (checked since issue 36), over no weights: the trainer fails.
    (broken / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
        "intermediate_size": 176, "num_attention_heads": 4, "vocab_size": 128,
        "max_position_embeddings": 256}))
    _, out, _ = rngdctl("submit", *SHORT, "--steps", "3", "--model", str(broken))
    daemon = start_daemon(home)
    assert daemon.wait(timeout=60) == 0
    with home.store() as store:
        run = store.run(int(out))
    assert run["status"] == "failed"
    assert run["exit_reason"]


def test_a_run_past_its_deadline_times_out(home, rngdctl):
    _, out, _ = rngdctl("submit", *SHORT, "--steps", "100000", "--deadline", "3")
    daemon = start_daemon(home)
    assert daemon.wait(timeout=60) == 0
    with home.store() as store:
        assert store.run(int(out))["status"] == "timeout"
