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
from pathlib import Path

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


def _matches(target: str, rdev: int | None, devices: dict[str, int],
             prefixes: tuple[str, ...]) -> bool:
    # Paths are remapped inside containers: the device number is the stable key.
    if rdev is not None and rdev in devices.values():
        return True
    return any(target == p or target.startswith(p) for p in prefixes)


def _prefixes(globs) -> tuple[str, ...]:
    return tuple(g.rstrip("*") for g in globs)


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _process_start(pid_dir: Path) -> float | None:
    import psutil

    try:
        return psutil.Process(int(pid_dir.name)).create_time()
    except psutil.Error:
        return None


def device_holders(globs=DEVICE_GLOBS, proc: str = "/proc") -> tuple[list[Holder], int]:
    """Processes holding a device file, and how many processes could not be read."""
    devices = device_files(globs)
    prefixes = _prefixes(globs)
    holders: list[Holder] = []
    unreadable = 0
    for pid_dir in Path(proc).iterdir():
        if not pid_dir.name.isdigit():
            continue
        fd_dir = pid_dir / "fd"
        try:
            fds = list(fd_dir.iterdir())
        except PermissionError:
            unreadable += 1
            continue
        except OSError:
            continue  # the process ended while we looked
        files = []
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            rdev = None
            if target.startswith("/dev/"):
                try:
                    st = os.stat(fd)
                    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                        rdev = st.st_rdev
                except OSError:
                    pass
            elif not any(target.startswith(p) for p in prefixes):
                continue
            if _matches(target, rdev, devices, prefixes):
                files.append(target)
        if not files:
            continue
        try:
            uid = pid_dir.stat().st_uid
            raw = (pid_dir / "cmdline").read_bytes()
        except OSError:
            continue
        cmdline = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
        holders.append(Holder(int(pid_dir.name), _user(uid), cmdline, tuple(sorted(set(files))),
                              _process_start(pid_dir)))
    return holders, unreadable


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
