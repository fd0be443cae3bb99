"""``--log FILE``: the records there alone, each step once (also after a resume), and a
person's view of the run on stderr (trainer/output/steplog.py, trainer/output/console.py)."""

from __future__ import annotations

import collections
import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer import records
from trainer.output.console import Console
from trainer.output.steplog import StepLog
from trainer.records import MAIN, RESUME, End, Event, Start, Step

REPO = Path(__file__).resolve().parents[2]

ARGS = ["--model", "tiny-llama", "--full", "--resident-layers", "1", "--backend", "cpu,cpu",
        "--seq-len", "16", "--accum", "2", "--lr", "1e-3", "--data", "synthetic", "--seed", "0"]


def logged(path: Path) -> list:
    return [records.parse_line(line) for line in path.read_text().splitlines()]


def step_counts(path: Path) -> collections.Counter:
    return collections.Counter((r.config_label, r.step) for r in logged(path)
                               if isinstance(r, Step))


# === the writer, without a trainer ===========================================


def step(n: int, label: str = MAIN) -> Step:
    return Step(config_label=label, step=n, loss=1.0, step_s=0.1, tokens=8, lr=1e-3)


def attempt(path: Path, steps, *, resumed_at: int | None = None, config=None) -> None:
    """One trainer process's records: its start, a resume event, its steps."""
    log = StepLog(str(path))
    log.write(Start(config_label=MAIN, config=config or {"run_id": "r1", "out": "o",
                                                          "steps": 9}))
    if resumed_at is not None:
        log.write(Event(RESUME, "resumed", data={"position": {MAIN: resumed_at}}))
    for n in steps:
        log.write(step(n))
    log.close()


def test_a_resumed_pass_does_not_log_again_the_steps_its_stopped_attempt_logged(tmp_path):
    path = tmp_path / "steps.jsonl"
    attempt(path, range(1, 8))  # stopped after step 7; its newest checkpoint: step 4
    attempt(path, range(5, 10), resumed_at=4)

    assert step_counts(path) == {(MAIN, n): 1 for n in range(1, 10)}


def test_a_run_that_did_not_resume_logs_every_step_even_if_the_file_has_them(tmp_path):
    path = tmp_path / "steps.jsonl"
    attempt(path, range(1, 8))
    attempt(path, range(1, 10))  # the same command again, from step 1: another run

    assert step_counts(path) == {**{(MAIN, n): 2 for n in range(1, 8)}, (MAIN, 8): 1,
                                 (MAIN, 9): 1}


def test_another_runs_steps_in_the_file_are_not_taken_for_this_ones(tmp_path):
    path = tmp_path / "steps.jsonl"
    attempt(path, range(1, 8), config={"run_id": "other", "out": "elsewhere", "steps": 9})
    attempt(path, range(5, 10), resumed_at=4)

    assert step_counts(path)[(MAIN, 5)] == 2


def test_a_line_torn_by_a_crash_is_ended_before_the_next_record(tmp_path):
    path = tmp_path / "steps.jsonl"
    attempt(path, range(1, 3))
    with open(path, "a") as f:
        f.write('{"kind":"step","v":1,"config_lab')  # SIGKILL mid-write
    attempt(path, range(1, 3), resumed_at=2)

    lines = path.read_text().splitlines()
    torn = lines.index('{"kind":"step","v":1,"config_lab')
    assert isinstance(records.parse_line(lines[torn + 1]), Start)


# === the trainer =============================================================


def trainer(tmp_path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RNGDCTL_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "trainer", "train", *ARGS, *args],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_with_log_stdout_is_quiet_and_stderr_says_the_progress_and_where_it_saved(tmp_path):
    log, out = tmp_path / "steps.jsonl", tmp_path / "model"
    proc = trainer(tmp_path, "--steps", "12", "--log", str(log), "--out", str(out))
    stdout, stderr = proc.communicate(timeout=600)

    assert proc.returncode == 0, stderr
    assert stdout == ""
    recs = logged(log)
    assert [r.step for r in recs if isinstance(r, Step)] == list(range(1, 13))
    assert isinstance(recs[-1], End) and recs[-1].status == "ok"
    assert "main step 12/12" in stderr
    assert f"saved the full model to {out}" in stderr


@pytest.mark.slow
def test_a_run_killed_and_resumed_logs_each_step_once_and_says_where_it_went_on_from(
        tmp_path):
    log, out = tmp_path / "steps.jsonl", tmp_path / "model"
    run = ["--steps", "40", "--baseline", "--baseline-steps", "40", "--interleave", "2",
           "--settle", "0", "--checkpoint-every", "20", "--log", str(log), "--out", str(out)]
    first = trainer(tmp_path, *run)
    deadline = time.monotonic() + 600
    while not log.exists() or (MAIN, 23) not in step_counts(log):
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
        time.sleep(0.01)
    first.send_signal(signal.SIGKILL)  # past the checkpoint at 20: steps 21-23 are redone
    first.wait()
    killed_at = max(n for label, n in step_counts(log) if label == MAIN)
    assert 20 < killed_at < 40

    second = trainer(tmp_path, *run)
    stdout, stderr = second.communicate(timeout=600)

    assert second.returncode == 0, stderr
    assert step_counts(log) == {(label, n): 1 for label in ("baseline", MAIN)
                                for n in range(1, 41)}
    assert stdout == ""
    assert re.search(rf"resumed from step 20, {re.escape(str(out))}/checkpoints/step-20 "
                     r"\(baseline at step \d+\)", stderr), stderr


# === stderr ==================================================================


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_with_log_on_a_terminal_the_progress_is_one_line_rewritten_at_each_step():
    screen = Terminal()
    console = Console(screen)
    console.progress = True
    for n in (1, 2, 3):
        console.step(MAIN, n, 3, 2.0, 0.05)
    console.line("saved")

    rewrites = screen.getvalue().split("\r\x1b[K")[1:]
    assert [r.split("] ", 1)[1] for r in rewrites[:2]] == ["main step 1/3 loss 2.0000 50.0 ms",
                                                           "main step 2/3 loss 2.0000 50.0 ms"]
    # The last progress line stays, ended by the next human line.
    assert rewrites[2].split("] ", 1)[1].startswith("main step 3/3 loss 2.0000 50.0 ms\n[trainer")
    assert rewrites[2].endswith("] saved\n")


def test_off_a_terminal_the_progress_is_a_line_every_tenth_step():
    out = io.StringIO()
    console = Console(out)
    console.progress = True
    for n in range(1, 26):
        console.step(MAIN, n, 25, 2.0, 0.05)

    steps = [line.split("] ", 1)[1].split(" loss")[0] for line in out.getvalue().splitlines()]
    assert steps == ["main step 1/25", "main step 10/25", "main step 20/25", "main step 25/25"]
