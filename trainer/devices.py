"""Who holds the RNGD cards: the processes with a device file open, read from /proc.

Below both the daemon (its host probes, daemon/probes/host_reading.py, and the holder
report) and the trainer (a card another process holds at start,
trainer/backends/kinds.py), so that neither imports the other: stdlib only.
"""

from __future__ import annotations

import fnmatch
import functools
import glob
import os
import pwd
import re
import stat
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

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


def device_files(globs=DEVICE_GLOBS) -> dict[str, int]:
    """Device paths that exist now, with their device numbers (st_rdev).

    Each folder a pattern names is listed only when it changed (``_names``), and
    only the names that match are stat'ed: ``/dev`` holds a hundred entries, and
    this runs every tick. A pattern with a wildcard in its folder part goes
    through ``glob``.
    """
    found: dict[str, int] = {}
    for pattern in globs:
        folder, name = os.path.split(pattern)
        if glob.has_magic(folder):
            paths = glob.glob(pattern)
        else:
            paths = [os.path.join(folder, n) for n in _names(folder, name)]
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                found[path] = st.st_rdev
    return found


#: (folder, pattern) -> ((st_dev, st_ino, st_mtime_ns) of the folder, the names matched)
_MATCHED: dict[tuple[str, str], tuple[tuple[int, int, int], list[str]]] = {}
#: A result is kept only when the folder last changed longer ago than this: a second
#: change within the same clock tick as the first would leave its mtime as it was.
SETTLED_S = 2.0


def _names(folder: str, pattern: str) -> list[str]:
    """The names in ``folder`` that ``pattern`` matches, listed again only when the
    folder's mtime moved (adding, removing or renaming an entry sets it): a stat
    instead of a listing of /dev (about 40 us) each tick."""
    path = folder or "."
    try:
        st = os.stat(path)
    except OSError:
        return []
    key = (st.st_dev, st.st_ino, st.st_mtime_ns)
    kept = _MATCHED.get((folder, pattern))
    if kept is not None and kept[0] == key:
        return kept[1]
    try:
        names = _matching(os.listdir(path), pattern)
    except OSError:
        return []
    if time.time() - st.st_mtime > SETTLED_S:
        _MATCHED[(folder, pattern)] = (key, names)
    return names


def _matching(names: list[str], pattern: str) -> list[str]:
    """The names ``glob`` would give for ``pattern`` in one folder (no hidden names unless
    the pattern starts with a dot); ``prefix*``, the usual form, without a regex."""
    if not glob.has_magic(pattern):
        return [pattern] if pattern in names else []
    if not pattern.startswith("."):
        names = [n for n in names if not n.startswith(".")]
    head = pattern[:-1]
    if pattern.endswith("*") and not glob.has_magic(head):
        return [n for n in names if n.startswith(head)]
    return fnmatch.filter(names, pattern)


def _prefixes(globs) -> tuple[str, ...]:
    return tuple(g.rstrip("*") for g in globs)


#: Device files whose numbers Linux fixes (Documentation/admin-guide/devices.txt) and that
#: a container runtime creates itself in every container: a descriptor on one of these
#: paths is that device, so it is stat'ed only when that number is one we look for.
FIXED_DEVICES = {
    "null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9),
    "tty": (5, 0), "console": (5, 1), "ptmx": (5, 2),
}
PTS_MAJORS = range(136, 144)  # /dev/pts/N, Unix98 pseudo-terminals


@dataclass(frozen=True)
class _Match:
    """What makes a descriptor a holding: a path prefix, or a device number."""

    prefixes: tuple[str, ...]
    rdevs: frozenset[int]
    #: finds, in a process's targets joined by NULs, any target worth a closer look
    search: Callable[[str], object]
    #: /dev paths known not to be any of ``rdevs`` (see FIXED_DEVICES)
    fixed: frozenset[str]
    fixed_prefixes: tuple[str, ...]

    def needs_number(self, target: str) -> bool:
        """Whether only the descriptor's device number can tell (a stat)."""
        return (bool(self.rdevs) and target.startswith("/dev/") and target not in self.fixed
                and not target.startswith(self.fixed_prefixes))


def _match(globs, rdevs: frozenset[int]) -> _Match:
    prefixes = _prefixes(globs)
    fixed = [n for n, (major, minor) in FIXED_DEVICES.items()
             if os.makedev(major, minor) not in rdevs] if rdevs else []
    # /dev/pts/ptmx (5:2) is where a container's /dev/ptmx points
    pts = bool(rdevs) and not any(os.major(r) in PTS_MAJORS or r == os.makedev(5, 2)
                                  for r in rdevs)
    return _Match(prefixes, rdevs, _searcher(prefixes, bool(rdevs), tuple(fixed), pts),
                  frozenset("/dev/" + n for n in fixed), ("/dev/pts/",) if pts else ())


@functools.lru_cache(maxsize=32)
def _searcher(prefixes: tuple[str, ...], by_number: bool, fixed: tuple[str, ...], pts: bool):
    """One search of a process's NUL-joined targets: most processes hold nothing, and
    then cost no per-descriptor Python. A plain substring test where one prefix is all
    there is to find (the default globs' two prefixes are one: ``/dev/rngd``)."""
    marks = sorted(set(prefixes), key=len)
    marks = [m for i, m in enumerate(marks) if not any(m.startswith(k) for k in marks[:i])]
    if not by_number and len(marks) == 1:
        mark = "\0" + marks[0]
        return lambda joined: mark in joined
    alternatives = [re.escape(m) for m in marks]
    if by_number:
        skip = [re.escape(n) + "(?![^\0])" for n in fixed] + (["pts/"] if pts else [])
        alternatives.append("/dev/" + (f"(?!{'|'.join(skip)})" if skip else ""))
    return re.compile("\0(?:" + "|".join(alternatives) + ")").search


class _Users:
    """uid to user name, looked up once per scan (``pwd`` reads /etc/passwd each call)."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}

    def __call__(self, uid: int) -> str:
        if uid not in self.names:
            try:
                self.names[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self.names[uid] = str(uid)
        return self.names[uid]


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _boot_time(proc: str) -> int | None:
    """The proc root's boot time (``btime`` in ``stat``), epoch seconds."""
    try:
        with open(f"{proc}/stat", "rb") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def _process_start(proc: str, pid: str, btime: int | None) -> float | None:
    """When the process started (epoch seconds): boot time plus its start in clock ticks
    (field 22 of ``stat``), as psutil computes it."""
    if btime is None:
        return None
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return btime + int(fields[19]) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


#: proc roots found to count fds (``_counts_fds``): a kernel does not stop doing so
_COUNTING: set[str] = set()


def _counts_fds(proc: str) -> bool:
    """Whether ``stat`` of a ``<pid>/fd`` folder gives its number of fds as its size, as
    /proc does from Linux 6.2 on. Checked on the proc root's ``self``: its size is what
    we have open, and a listing of it shows one more, the listing's own fd. Elsewhere
    (an older kernel: size 0; a generated tree: a folder's size in bytes) it says nothing."""
    if proc in _COUNTING:
        return True
    try:
        size = os.stat(f"{proc}/self/fd").st_size
        listed = len(os.listdir(f"{proc}/self/fd"))
    except OSError:
        return False
    if size > 0 and listed == size + 1:
        _COUNTING.add(proc)
        return True
    return False  # or another thread opened or closed one meanwhile: checked again next scan


def _fd_targets(proc_fd: int, pid: str, counts: bool) -> tuple[list[str], list[str]] | None:
    """The process's fd names and where each points; None when it has none or /proc
    would not say (PermissionError propagates: another user's process, unreadable
    without root).

    Where the kernel counts fds (``counts``), a process with none (every kernel
    thread: half of a host's /proc or more) costs one ``stat`` and no more. Else
    one open of ``<pid>/fd`` relative to the open proc root, and a readlink per
    fd relative to that (``dir_fd``): no path is walked from ``/`` again, per
    process or per fd. The readlinks run in one comprehension; only when an fd
    closed in between is each one tried on its own.
    """
    if counts:
        try:
            if not os.stat(f"{pid}/fd", dir_fd=proc_fd).st_size:
                return None
        except OSError:
            pass  # the open below says why
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
        except PermissionError:
            # Refused for the process as a whole (the kernel's ptrace check), never for
            # one fd: every other readlink would be refused too, each at the cost of an
            # exception (pid 1 of this benchmark's host: 287 of them).
            return None
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


def device_holders(globs=DEVICE_GLOBS, proc: str = "/proc",
                   devices: dict[str, int] | None = None) -> tuple[list[Holder], int]:
    """Processes holding a device file, and how many processes could not be read.

    ``proc`` is the proc root (a generated tree in the benchmark and tests);
    ``devices`` the ``device_files(globs)`` already read, if the caller has them. A
    file is held when its path starts with a glob's prefix, or, when device
    files exist, when it is a device with one of their numbers: paths are
    remapped inside containers, the device number is the stable key.
    """
    if devices is None:
        devices = device_files(globs)
    match = _match(globs, frozenset(devices.values()))
    search = match.search
    holders: list[Holder] = []
    unreadable = 0
    # Read once per scan, and only for a holder.
    users, boot_time = _Users(), functools.cache(lambda: _boot_time(proc))
    counts = _counts_fds(proc)
    proc_fd = os.open(proc, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for pid in os.listdir(proc_fd):
            if not pid.isdigit():
                continue
            try:
                read = _fd_targets(proc_fd, pid, counts)
            except PermissionError:
                unreadable += 1
                continue
            if not read or not search("\0" + "\0".join(read[1])):
                continue
            files = [target for fd, target in zip(*read)
                     if target.startswith(match.prefixes)
                     or (match.needs_number(target)
                         and _device_number(proc, pid, fd) in match.rdevs)]
            if files:
                holder = _holder(proc, pid, files, users, boot_time)
                if holder is not None:
                    holders.append(holder)
    finally:
        os.close(proc_fd)
    return holders, unreadable


def _holder(proc: str, pid: str, files: list[str], users: _Users,
            boot_time: Callable[[], int | None]) -> Holder | None:
    try:
        uid = os.stat(f"{proc}/{pid}").st_uid
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    cmdline = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
    return Holder(int(pid), users(uid), cmdline, tuple(sorted(set(files))),
                  _process_start(proc, pid, boot_time()))
