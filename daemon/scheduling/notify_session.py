"""A notifier's keeper: runs one notifier command and, at the timeout, ends all it started.

Run by daemon/scheduling/notify.py as ``python -I -S notify_session.py TIMEOUT CMD...``
in a session of its own, so it uses the standard library only. It first makes itself
a child subreaper (Linux's ``prctl(PR_SET_CHILD_SUBREAPER)``, unprivileged): a process
the command starts that leaves the command's session (``setsid``, a double fork) is
re-parented to the keeper when its parent ends, not to init, so it stays the keeper's
to end. The command may leave processes running until the timeout (a sound played in
the background); at the timeout the keeper SIGKILLs every descendant, pass after pass,
until none is left. Where prctl is not available it still kills the command's process
group at the timeout.

The command's stderr is the keeper's (the daemon reads a bounded tail of it), its
stdout goes nowhere. On its own stdout the keeper writes one JSON line: how the command
ended (``exit``, ``signal``, ``timeout``, or ``error`` when it could not start) and how
many processes it left that the timeout ended (``leftovers``).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.02
#: How long the keeper goes on killing descendants that keep appearing (a fork bomb).
END_ALL_S = 5.0


def make_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> dict[int, int]:
    """Each live process's parent, from /proc (a process gone meanwhile is left out)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2:].split()  # after "pid (comm) "
        if fields[0] != b"Z":
            parents[int(entry)] = int(fields[1])
    return parents


def descendants(root: int) -> list[int]:
    """The live descendants of ``root`` (zombies left out: reaping ends those)."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found, frontier = [], [root]
    while frontier:
        for pid in children.get(frontier.pop(), []):
            found.append(pid)
            frontier.append(pid)
    return found


def end_all(command_pid: int, subreaper: bool) -> int:
    """SIGKILL everything the command started (and the command); how many were killed."""
    try:
        os.killpg(command_pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if not subreaper:
        return 0
    killed: set[int] = set()
    until = time.monotonic() + END_ALL_S
    while time.monotonic() < until:
        alive = descendants(os.getpid())
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        reap()
        time.sleep(POLL_S / 4)
    return len(killed - {command_pid})


def reap() -> dict[int, int]:
    """Reap every ended child; their wait statuses by pid."""
    statuses = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return statuses
        if pid == 0:
            return statuses
        statuses[pid] = status


def run(timeout: float, argv: list[str]) -> dict:
    subreaper = make_subreaper()
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 close_fds=True, process_group=0)
    except FileNotFoundError:
        return {"error": "not_found"}
    except PermissionError:
        return {"error": "permission"}
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}
    deadline = time.monotonic() + timeout
    status = None  # the command's wait status, once it ended
    while True:
        status = reap().get(child.pid, status)
        if status is not None and not (subreaper and _has_children()):
            return _ended(status)  # it ended, and nothing it started is left
        if time.monotonic() >= deadline:
            in_time = status is not None
            leftovers = end_all(child.pid, subreaper)
            status = reap().get(child.pid, status)
            return {**(_ended(status) if in_time else {"timeout": True}),
                    "leftovers": leftovers}
        time.sleep(POLL_S)


def _has_children() -> bool:
    """Whether any child of ours lives or waits to be reaped (none is reaped here)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def _ended(status: int | None) -> dict:
    if status is None:
        return {"error": "lost"}
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"exit": os.WEXITSTATUS(status)}


def main(args: list[str]) -> int:
    result = run(float(args[0]), args[1:])
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
