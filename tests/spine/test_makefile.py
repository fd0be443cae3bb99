"""`make demo` as a new user runs it: the set-up says what it installs as it does it, and
the demo ends by saying how to put rngdctl on PATH, however it ended."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "-C", str(REPO), *args], capture_output=True,
                          text=True, timeout=60, check=False, env={**os.environ, **(env or {})})


@pytest.fixture
def venv(tmp_path):
    """A set-up .venv whose rngdctl is a stand-in: prints its arguments, exits $DEMO_EXIT."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    script = venv / "bin" / "rngdctl"
    script.write_text(f"#!{sys.executable}\n"
                      "import os, signal, sys, time\n"
                      "signal.signal(signal.SIGINT, lambda *_: (print('stopping', flush=True),"
                      " time.sleep(1), print('stopped', flush=True), sys.exit(130)))\n"
                      "print(' '.join(sys.argv[1:]), flush=True)\n"
                      "time.sleep(float(os.environ.get('DEMO_S', '0')))\n"
                      "sys.exit(int(os.environ.get('DEMO_EXIT', '0')))\n")
    script.chmod(0o755)
    (venv / ".installed").touch()  # newer than pyproject.toml: nothing to install
    return venv


def hint(venv) -> str:
    return f"rngdctl is in {venv}/bin; to put it on PATH: . {venv}/bin/activate"


def test_the_first_set_up_says_each_install_before_it_and_hides_no_progress(tmp_path):
    dry = make("-n", "demo", f"VENV={tmp_path / 'fresh'}")
    lines = dry.stdout.splitlines()
    pips = [i for i, line in enumerate(lines) if " -m pip install " in line]
    assert len(pips) == 3
    for i in pips:
        assert "-q" not in lines[i].split(), lines[i]
        assert lines[i - 1].startswith('echo "== '), lines[i - 1]


def test_make_demo_ends_by_saying_how_to_put_rngdctl_on_path(venv):
    done = make("demo", f"VENV={venv}", "DEMO_ARGS=--no-tui")
    assert done.returncode == 0
    assert done.stdout.splitlines() == ["demo --no-tui", hint(venv)]


def test_a_failed_demo_still_ends_with_the_hint_and_make_fails(venv):
    failed = make("demo", f"VENV={venv}", env={"DEMO_EXIT": "1"})
    assert failed.returncode != 0
    assert failed.stdout.splitlines()[-1] == hint(venv)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_ctrl_c_in_make_demo_lets_the_demo_finish_stopping_then_gives_the_hint(venv):
    from tests.tui.tui_support import Pane

    script = f'trap : INT; make -s -C {REPO} demo VENV={venv}; echo "[make exit $?]"; sleep 600'
    pane = Pane(["sh", "-c", script], {"DEMO_S": "60"})
    try:
        pane.wait_for(lambda t: "demo" in t, 30, "the demo")
        time.sleep(0.5)
        pane.keys("C-c")  # SIGINT to make, its shell and the demo
        text = pane.wait_for(lambda t: "[make exit" in t and t, 30, "make's exit")
        lines = [line for line in text.splitlines() if line.strip()]
        stopped = lines.index("stopped")
        # After the demo ended, not before (the pane is 120 columns: the line wraps).
        assert lines[stopped + 1].startswith(f"rngdctl is in {venv}/bin; to put it on PATH")
    finally:
        pane.close()
