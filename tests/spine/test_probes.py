import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.probes.host_reading import device_holders, read_host


@pytest.fixture
def holder_of():
    """Starts a process that keeps ``path`` open; yields a function that takes the path."""
    procs = []

    def start(path):
        proc = subprocess.Popen([sys.executable, "-c",
                                 f"f = open({str(path)!r}); import time; time.sleep(60)"])
        procs.append(proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if any(os.readlink(f"/proc/{proc.pid}/fd/{fd}") == str(path)
                       for fd in os.listdir(f"/proc/{proc.pid}/fd")):
                    return proc
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("holder did not open the file")

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_process_holding_a_device_path_is_reported_with_its_command_line(tmp_path,
                                                                              holder_of):
    device = tmp_path / "rngd" / "npu0pe0-3"
    device.parent.mkdir()
    device.touch()
    proc = holder_of(device)
    holders, _ = device_holders([str(tmp_path / "rngd" / "*")])
    mine = [h for h in holders if h.pid == proc.pid]
    assert mine and mine[0].files == (str(device),)
    assert "time.sleep(60)" in mine[0].cmdline
    assert mine[0].started is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_holder_is_matched_by_device_number_when_its_path_differs(tmp_path, holder_of):
    # Inside a container the same card shows under another path: st_rdev is the key.
    os.mknod(tmp_path / "rngd0", 0o600 | 0o020000, os.stat("/dev/zero").st_rdev)
    proc = holder_of("/dev/zero")
    holders, _ = device_holders([str(tmp_path / "rngd*")])
    assert proc.pid in [h.pid for h in holders]


def test_no_device_files_means_no_holders_and_a_load_reading():
    reading = read_host(("/nonexistent/rngd*",))
    assert reading.holders == ()
    assert len(reading.load) == 3


def test_a_generated_proc_tree_is_scanned_for_holders_of_its_device_files(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from fake_proc import make_proc

    proc, _files, want = make_proc(tmp_path, processes=120, fds_per_process=9, holder_every=25)
    reading = read_host((str(tmp_path / "dev" / "rngd*"),), proc=str(proc), now=5.0)
    assert {h.pid: list(h.files) for h in reading.holders} == want
    first = min(reading.holders, key=lambda h: h.pid)
    assert first.cmdline == "python train.py --rank 0"
    # btime 1700000000 plus the process's start, 100 * i ticks (i = 0 for the first)
    assert first.started == 1_700_000_000
    later = next(h for h in reading.holders if h.pid == 1025)
    assert later.started == 1_700_000_000 + 2500 / os.sysconf("SC_CLK_TCK")
    assert reading.complete


def _char_device(path):
    # /dev/zero's number: a real device, so that the file can stand for a card.
    os.mknod(path, 0o600 | 0o020000, os.stat("/dev/zero").st_rdev)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_device_globs_match_the_names_glob_would(tmp_path):
    for name in ("rngd0", "rngd1", "rngd2", ".rngd3"):
        _char_device(tmp_path / name)
    (tmp_path / "rngd9").touch()  # a regular file is no device
    reading = read_host((str(tmp_path / "rngd[01]"), str(tmp_path / "*")))
    assert reading.devices == tuple(str(tmp_path / n) for n in ("rngd0", "rngd1", "rngd2"))
    assert read_host((str(tmp_path / ".rngd*"),)).devices == (str(tmp_path / ".rngd3"),)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_device_file_added_or_removed_shows_in_the_next_reading(tmp_path):
    globs = (str(tmp_path / "rngd*"),)
    _char_device(tmp_path / "rngd0")
    long_ago = time.time() - 3600
    os.utime(tmp_path, (long_ago, long_ago))  # a /dev that settled long ago
    assert read_host(globs).devices == (str(tmp_path / "rngd0"),)
    _char_device(tmp_path / "rngd1")
    (tmp_path / "rngd0").unlink()
    assert read_host(globs).devices == (str(tmp_path / "rngd1"),)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_device_file_added_within_the_same_clock_tick_as_the_last_change_is_found(tmp_path):
    globs = (str(tmp_path / "rngd*"),)
    _char_device(tmp_path / "rngd0")
    assert read_host(globs).devices == (str(tmp_path / "rngd0"),)
    changed = os.stat(tmp_path).st_mtime_ns
    _char_device(tmp_path / "rngd1")
    os.utime(tmp_path, ns=(changed, changed))  # a coarse clock: the folder's mtime unmoved
    assert read_host(globs).devices == (str(tmp_path / "rngd0"), str(tmp_path / "rngd1"))
