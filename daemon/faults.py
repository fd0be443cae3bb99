"""Fault injection: SIGKILL the daemon at a named point, to test crash safety; a full disk.

``RNGDCTL_FAULT=<point>`` in the daemon's environment kills it with SIGKILL
the first time it reaches that point; unset (always, outside tests and
bench/crash_kill.py) it costs one dictionary lookup. SIGKILL, not an
exception: nothing runs after it, no ``finally``, no flush, as when the
kernel or a user kills the daemon.

``RNGDCTL_FAULT=store_full`` is not a kill: while it is set, the store refuses
a run's end as SQLite refuses a write on a full disk (``Store.finish_run``).
"""

from __future__ import annotations

import os
import signal

ENV = "RNGDCTL_FAULT"

#: The points, in the order a launch reaches them.
POINTS = (
    "after_claim",  # the run is `launching` in the store; no trainer yet
    "after_spawn",  # the trainer (or the Job) exists; its pid (or name) is not stored
    "after_record",  # the pid (or Job name) is stored, the run is `running`
    "after_first_step",  # the first step is stored; its log offset is not
)


def point(name: str) -> None:
    """Die here if the environment names this point."""
    assert name in POINTS, name
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


#: The store refuses a run's end, as a full disk would, while the environment says so.
STORE_FULL = "store_full"


def store_full() -> None:
    """Raise SQLite's full-disk error here while ``RNGDCTL_FAULT=store_full``."""
    if os.environ.get(ENV) == STORE_FULL:
        import sqlite3

        raise sqlite3.OperationalError("database or disk is full")
