"""A generated /proc for the holder scan: processes with fd symlinks, some to device files.

``make_proc(root, processes, fds_per_process, devices)`` writes
``root/proc/<pid>/{fd/<n>, cmdline, stat}`` and ``root/proc/stat`` (btime),
and ``devices`` fake device files under ``root/dev`` (regular files: they
match by path prefix, as a device path does). Every ``holder_every``-th
process holds one of them; the other fds point where a real process's do
(/dev/null, pipes, sockets, libraries). Used by tests/spine/test_probes.py
and bench/holder_scan.py.
"""

from __future__ import annotations

import os
from pathlib import Path

OTHER_TARGETS = ("/dev/null", "/dev/pts/0", "pipe:[4242]", "socket:[777]",
                 "/usr/lib/x86_64-linux-gnu/libc.so.6", "anon_inode:[eventfd]", "/tmp/log.txt")


def make_proc(root: Path, processes: int, fds_per_process: int, devices: int = 4,
              holder_every: int = 50) -> tuple[Path, list[Path], dict[int, list[str]]]:
    """(proc root, the fake device files, {holder pid: files it holds})."""
    proc, dev = root / "proc", root / "dev"
    proc.mkdir(parents=True)
    dev.mkdir()
    files = [dev / f"rngd{i}" for i in range(devices)]
    for f in files:
        f.touch()
    (proc / "stat").write_text("cpu  1 2 3 4\nbtime 1700000000\n")
    (proc / "self").symlink_to("1000")  # not a pid: the scan skips it
    holders: dict[int, list[str]] = {}
    for i in range(processes):
        pid = 1000 + i
        fd_dir = proc / str(pid) / "fd"
        fd_dir.mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(f"python\0train.py\0--rank\0{i}\0".encode())
        (proc / str(pid) / "stat").write_text(
            f"{pid} (python) S 1 {pid} {pid} 0 -1 4194304 " + "0 " * 12 + f"{100 * i} 0\n")
        for fd in range(fds_per_process):
            target = OTHER_TARGETS[(i + fd) % len(OTHER_TARGETS)]
            if i % holder_every == 0 and fd == fds_per_process - 1:
                target = str(files[i // holder_every % devices])
                holders[pid] = [target]
            os.symlink(target, fd_dir / str(fd))
    return proc, files, holders
