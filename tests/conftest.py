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
    the run and the weights' sha256 (``files``), as trainer/save.py writes it."""
    from trainer import ownership

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    owner = ownership.Owner(str(run_id), store.home_id)
    ownership.write_info(folder, {"owner": owner.as_dict(), "files": files or {}})
