import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def demo(home, *args):
    # A session of its own, so a failing test can kill the demo and its daemon together.
    return subprocess.Popen([sys.executable, "-m", "rngdctl", "demo", "--home", str(home.path),
                             "--no-tui", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.fixture
def reaper(home):
    """Kills whatever a failed demo test left: the demo, its daemon and the trainer."""
    procs = []
    yield procs.append
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lock = home.path / "daemon.lock"  # the daemon: a session of its own
    daemon = [int(lock.read_text())] if lock.exists() and lock.read_text().isdigit() else []
    with home.store() as store:
        for pid in daemon + [run["pid"] for run in store.runs() if run.get("pid")]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_the_demo_trains_and_writes_its_note(home, reaper):
    proc = demo(home, "--steps", "8")
    reaper(proc)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    lines = out.strip().splitlines()
    note = Path(next(line for line in lines if line.startswith("note: ")).removeprefix("note: "))
    assert note.parent == home.path / "experiments"
    assert "8/8 steps" in note.read_text()
    # It saved its model, and says how to load it in one line of Python that works.
    model = home.path / "runs" / "1" / "model"
    assert f"model: {model}" in lines
    load = lines[-1].strip().removeprefix("load it: python -c ").strip('"')
    check = subprocess.run([sys.executable, "-c",
                            load + "; print(model.config.num_hidden_layers)"],
                           capture_output=True, text=True, timeout=300, check=False)
    assert check.stdout.strip() == "4", check.stderr


def test_an_interrupted_demo_cancels_its_run_and_leaves_no_trainer(home, reaper):
    proc = demo(home, "--steps", "100000")
    reaper(proc)
    # Start-up (torch, transformers, a 10-step baseline) takes seconds on a quiet host
    # and minutes on a loaded one: the deadline only catches a demo that never trains.
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        with home.store() as store:
            if store.step_counts(1).get("main", 0) >= 2:
                pid = store.run(1)["pid"]
                break
        time.sleep(0.2)
    else:
        raise AssertionError("the demo run never reached step 2")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130
    with home.store() as store:
        assert store.run(1)["status"] == "cancelled"
        steps = store.step_counts(1)["main"]
    assert f"demo interrupted: run 1 cancelled after step {steps} of 100000; checkpoint " in err
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
