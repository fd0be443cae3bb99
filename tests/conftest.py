import os
import signal
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# Every subprocess a test starts trains on one thread: the suite runs on 2 cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# A suite started in the background of a shell without job control inherits SIGINT
# ignored, every subprocess with it, and Python then never raises KeyboardInterrupt:
# the tests that press Ctrl-C (the demo, events --follow) would hang. A handled signal
# is reset to the default on exec, so handling it here gives every child Ctrl-C back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def home(tmp_path):
    from daemon.home import Home

    return Home(tmp_path / "home").ensure()


@pytest.fixture
def store(home):
    with home.store() as s:
        yield s


@pytest.fixture
def rngdctl(home):
    """Runs the real CLI in a subprocess: returns (exit code, stdout, stderr)."""
    import subprocess

    def run(*args, timeout=60, env=None):
        proc = subprocess.run([sys.executable, "-m", "rngdctl", "--home", str(home.path), *args],
                              capture_output=True, text=True, timeout=timeout, check=False,
                              env={**os.environ, **(env or {})}, cwd=REPO)
        return proc.returncode, proc.stdout, proc.stderr

    return run


# === a second local user =====================================================
# The attacks of another user of a shared node run as `nobody` through setpriv: that needs
# root (CI and these machines run as root); elsewhere those tests skip, saying why.
NOBODY = 65534
needs_nobody = pytest.mark.skipif(
    os.geteuid() != 0 or not __import__("shutil").which("setpriv"),
    reason="acting as a second user (nobody) needs root and setpriv")


def as_nobody(*argv: str, check: bool = True, timeout: float = 60):
    """Run ``argv`` as the user nobody (uid and gid 65534, no other groups)."""
    import subprocess

    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                           "--clear-groups", *argv], check=check, timeout=timeout,
                          capture_output=True, text=True)


@pytest.fixture
def shared_tmp(tmp_path):
    """A folder every local user may write, as /tmp is on a shared node (sticky, 1777), that
    nobody can reach (pytest's own temporary folders are 0700)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="rngdctl-shared-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def claim_as_saved(store, run_id: int, folder, files: dict | None = None) -> None:
    """``folder`` as run ``run_id`` of ``store``'s home saved it: its ``rngdctl.json`` names
    the run and the weights' sha256 (``files``), as trainer/output/save.py writes it."""
    from trainer import ownership

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    owner = ownership.Owner(str(run_id), store.home_id)
    ownership.write_info(folder, {"owner": owner.as_dict(), "files": files or {}})


# === a folder whose mode bits stop the tests' own user ========================
# A folder of mode 000 stops every user but root, and nobody cannot run this venv's python
# (it lies under /root here), so the tests of unreadable paths run their subprocess as root
# without the two capabilities that take root past mode bits (CAP_DAC_OVERRIDE and
# CAP_DAC_READ_SEARCH, dropped from setpriv's bounding set); as another user, as it is.
_BOUND_BY_MODE = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


def _mode_bits_bind() -> bool:
    import subprocess

    if os.geteuid() != 0:
        return True
    try:
        return subprocess.run([*_BOUND_BY_MODE, "true"], check=False, timeout=10,
                              capture_output=True).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_mode_bits = pytest.mark.skipif(
    not _mode_bits_bind(),
    reason="root past mode bits: dropping CAP_DAC_OVERRIDE needs setpriv and CAP_SETPCAP")


def bound_by_mode_bits(argv: list[str]) -> list[str]:
    """``argv`` run so that a folder's mode bits stop it as they stop any user."""
    return [*_BOUND_BY_MODE, *argv] if os.geteuid() == 0 else list(argv)


@pytest.fixture
def locked_dir(tmp_path):
    """A folder of mode 000 holding a JSONL data file, a model folder and a folder: any path
    under it cannot be read by a process ``bound_by_mode_bits``."""
    import json

    locked = tmp_path / "locked"
    (locked / "model").mkdir(parents=True)
    (locked / "model" / "config.json").write_text("{}")
    (locked / "out").mkdir()
    (locked / "data.jsonl").write_text(json.dumps({"text": "hello"}) + "\n")
    locked.chmod(0)
    yield locked
    locked.chmod(0o700)
