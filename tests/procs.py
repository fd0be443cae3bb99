"""A home's trainer processes as `ps` shows them, and waiting on a real daemon: shared by the
crash, resume and end-to-end tests and bench/crash_kill.py."""

from __future__ import annotations

import subprocess
import threading
import time


def trainers(home) -> list[int]:
    """Pids of this home's trainers, as `ps` lists them.

    A trainer forks to run `git rev-parse`: between that fork and its exec the child
    still shows the trainer's command line. It is one trainer, not two, so a match
    whose parent is itself a match is not counted.
    """
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True,
                         text=True, timeout=10, check=True).stdout
    marker = f"{home.path}/runs/"
    found = {}
    for line in out.splitlines():
        if " -m trainer train " in line and marker in line:
            pid, ppid = line.split()[:2]
            found[int(pid)] = int(ppid)
    return [pid for pid, ppid in found.items() if ppid not in found]


class PsSampler(threading.Thread):
    """The most trainers `ps` ever showed at once, sampled every 50 ms (a context manager).

    ``over`` keeps each sample that showed more than one, with its time.
    """

    def __init__(self, home):
        super().__init__(daemon=True)
        self.home, self.most, self.samples, self.over = home, 0, 0, []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            pids = trainers(self.home)
            self.samples += 1
            self.most = max(self.most, len(pids))
            if len(pids) > 1:
                self.over.append((time.time(), pids))
            self.stop.wait(0.05)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join()


def wait_for(predicate, timeout: float = 90.0, every: float = 0.1):
    """``predicate()``'s first true value, polled every ``every`` s; AssertionError after
    ``timeout`` s (a real daemon and trainer, so real time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting")
