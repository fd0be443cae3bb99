import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def demo(home, *args):
    return subprocess.Popen([sys.executable, "-m", "rngdctl", "demo", "--home", str(home.path),
                             "--no-tui", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_the_demo_trains_and_writes_its_note(home):
    proc = demo(home, "--steps", "8")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    note = Path(out.strip().splitlines()[-1].removeprefix("note: "))
    assert note.parent == home.path / "experiments"
    assert "8/8 steps" in note.read_text()


def test_an_interrupted_demo_cancels_its_run_and_leaves_no_trainer(home):
    proc = demo(home, "--steps", "100000")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with home.store() as store:
            if store.step_counts(1).get("main", 0) >= 2:
                pid = store.run(1)["pid"]
                break
        time.sleep(0.2)
    else:
        raise AssertionError("the demo run never reached step 2")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "demo interrupted; its run was cancelled" in err
    with home.store() as store:
        assert store.run(1)["status"] == "cancelled"
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(pid, 0)
