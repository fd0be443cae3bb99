"""Host probes: load average and the processes that hold RNGD device files.

A probe returns plain data (a ``HostReading``) so that a reading taken on
another node (a future ``rngdctl agent``) can stand in for a local one.
"""

from __future__ import annotations

import glob
import os
import pwd
import stat
import time
from dataclasses import asdict, dataclass, field

DEVICE_GLOBS = ("/dev/rngd*", "/dev/rngd/*")


@dataclass(frozen=True)
class Holder:
    """A process with one or more device files open."""

    pid: int
    user: str
    cmdline: str
    files: tuple[str, ...]
    started: float | None = None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["files"] = list(self.files)
        return d


@dataclass(frozen=True)
class HostReading:
    time: float
    load: tuple[float, float, float]
    holders: tuple[Holder, ...]
    #: False when /proc of other users' processes could not be read (not root):
    #: their device files are then invisible.
    complete: bool
    unreadable: int = 0
    devices: tuple[str, ...] = field(default_factory=tuple)

    @property
    def visibility_note(self) -> str:
        if self.complete:
            return "every process visible"
        return (f"not root: {self.unreadable} processes of other users could not be "
                f"inspected, so their device files are invisible")


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def device_files(globs=DEVICE_GLOBS) -> dict[str, int]:
    """Device paths that exist now, with their device numbers (st_rdev)."""
    found: dict[str, int] = {}
    for pattern in globs:
        for path in glob.glob(pattern):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                found[path] = st.st_rdev
    return found


def _prefixes(globs) -> tuple[str, ...]:
    return tuple(g.rstrip("*") for g in globs)


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _process_start(proc: str, pid: str) -> float | None:
    """When the process started (epoch seconds), from the proc root: boot time plus its
    start in clock ticks (field 22 of ``stat``), as psutil computes it."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open(f"{proc}/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def _fd_targets(proc_fd: int, pid: str) -> tuple[list[str], list[str]] | None:
    """The process's fd names and where each points; None when /proc would not say
    (PermissionError propagates: another user's process, unreadable without root).

    One open of ``<pid>/fd`` relative to the open proc root, and a readlink per
    fd relative to that (``dir_fd``): no path is walked from ``/`` again, per
    process or per fd. The readlinks run in one comprehension; only when an fd
    closed in between is each one tried on its own.
    """
    try:
        dfd = os.open(f"{pid}/fd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=proc_fd)
    except PermissionError:
        raise
    except OSError:
        return None  # the process ended while we looked
    readlink = os.readlink
    try:
        names = os.listdir(dfd)
        try:
            return names, [readlink(name, dir_fd=dfd) for name in names]
        except OSError:
            pass
        kept, targets = [], []
        for name in names:
            try:
                targets.append(readlink(name, dir_fd=dfd))
            except OSError:
                continue
            kept.append(name)
        return kept, targets
    finally:
        os.close(dfd)


def _device_number(proc: str, pid: str, fd: str) -> int | None:
    try:
        st = os.stat(f"{proc}/{pid}/fd/{fd}")
    except OSError:
        return None
    return st.st_rdev if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else None


def device_holders(globs=DEVICE_GLOBS, proc: str = "/proc") -> tuple[list[Holder], int]:
    """Processes holding a device file, and how many processes could not be read.

    ``proc`` is the proc root (a generated tree in the benchmark and tests). A
    file is held when its path starts with a glob's prefix, or, when device
    files exist, when it is a device with one of their numbers: paths are
    remapped inside containers, the device number is the stable key.
    """
    rdevs = set(device_files(globs).values())
    prefixes = _prefixes(globs)
    # Whether a process may hold one at all is one search of its targets joined
    # by NULs (which no path holds): most hold none, and cost no per-fd Python.
    marks = tuple("\0" + p for p in prefixes) + (("\0/dev/",) if rdevs else ())
    holders: list[Holder] = []
    unreadable = 0
    proc_fd = os.open(proc, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for pid in os.listdir(proc_fd):
            if not pid.isdigit():
                continue
            try:
                read = _fd_targets(proc_fd, pid)
            except PermissionError:
                unreadable += 1
                continue
            if not read or not read[1]:
                continue
            joined = "\0" + "\0".join(read[1])
            if not any(mark in joined for mark in marks):
                continue
            files = [target for fd, target in zip(*read)
                     if target.startswith(prefixes)
                     or (rdevs and target.startswith("/dev/")
                         and _device_number(proc, pid, fd) in rdevs)]
            if files:
                holder = _holder(proc, pid, files)
                if holder is not None:
                    holders.append(holder)
    finally:
        os.close(proc_fd)
    return holders, unreadable


def _holder(proc: str, pid: str, files: list[str]) -> Holder | None:
    try:
        uid = os.stat(f"{proc}/{pid}").st_uid
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    cmdline = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
    return Holder(int(pid), _user(uid), cmdline, tuple(sorted(set(files))),
                  _process_start(proc, pid))


def read_host(globs=DEVICE_GLOBS, proc: str = "/proc", now: float | None = None) -> HostReading:
    holders, unreadable = device_holders(globs, proc)
    return HostReading(
        time=time.time() if now is None else now,
        load=load_average(),
        holders=tuple(holders),
        complete=unreadable == 0,
        unreadable=unreadable,
        devices=tuple(sorted(device_files(globs))),
    )
