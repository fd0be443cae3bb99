"""`rngdctl wait`: poll the store until runs end, saying so as they do.

Only a daemon ends a run that is queued or running, so a waiter with no daemon
running would wait forever: it gives up with ``NoDaemon`` (exit 3) once no
live daemon has been seen for as long as every reader takes to call a daemon
gone (``liveness.stale_after``: three ticks, at least 10 s), which also lets a
daemon started just before ``wait`` write its first heartbeat.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from daemon.errors import NoDaemon
from daemon.scheduling.liveness import Liveness, ago
from daemon.store import FINISHED, QUEUED


def wait_for_runs(store, refs, *, timeout: float | None = None, interval: float = 2.0,
                  on_end=None, daemon: Callable[[], Liveness] | None = None,
                  grace: float = 0.0, say: Callable[[str], None] | None = None,
                  progress_every: float | None = None, clock=time.monotonic,
                  sleep=time.sleep) -> tuple[dict, list]:
    """Poll the store until every run has ended, or ``timeout`` seconds passed.

    ``on_end(run)`` is called once per run as it ends (at once for one that has
    ended already), in the order they are seen to end. ``daemon()`` reads
    whether a daemon runs (None: wait whatever); none for ``grace`` seconds while
    a run is left raises NoDaemon. ``say(line)`` gets the human lines: that no
    daemon runs, and every ``progress_every`` seconds where each run stands.
    Returns ({id: status} of the runs that ended, [ids still not ended]).
    """
    ids = list(dict.fromkeys(store.run(ref)["id"] for ref in refs))  # unknown: NoSuchRun first
    pending, ended = list(ids), {}
    start = clock()
    deadline = None if timeout is None else start + timeout
    absent = _Absence(grace, say)
    next_progress = None if progress_every is None else start + progress_every
    while True:
        for run_id in list(pending):
            run = store.run(run_id)
            if run["status"] in FINISHED:
                pending.remove(run_id)
                ended[run_id] = run["status"]
                if on_end is not None:
                    on_end(run)
        now = clock()
        if not pending or (deadline is not None and now >= deadline):
            return ended, pending
        if daemon is not None:
            absent.check(daemon(), pending, now)
        if next_progress is not None and now >= next_progress and say is not None:
            say(progress_line(store, pending, now - start))
            next_progress = now + progress_every
        sleep(interval if deadline is None else max(0.0, min(interval, deadline - clock())))


class _Absence:
    """How long no daemon has run while the waiter waited; NoDaemon past ``grace``."""

    def __init__(self, grace: float, say):
        self.grace, self.say = grace, say
        self.since: float | None = None

    def check(self, live: Liveness, pending: list[int], now: float) -> None:
        if live.running:
            self.since = None
            return
        runs = f"run{'s' if len(pending) > 1 else ''} {', '.join(map(str, pending))}"
        if self.since is None:
            self.since = now
            if self.grace > 0 and self.say is not None:
                self.say(f"{live.summary()}: {runs} cannot end without one; waiting "
                         f"{self.grace:.0f} s for a daemon to start")
        if now - self.since >= self.grace:
            raise NoDaemon(f"{live.summary()}: {runs} would never end; start `rngdctl "
                           f"daemon`, or pass --no-daemon-ok to wait anyway")


def progress_line(store, pending: list[int], waited: float) -> str:
    """Where each run left stands: ``waited 3 m: run 7 running, step 120/500; run 8 queued``."""
    parts = []
    for run_id in pending:
        run = store.run(run_id)
        part = f"run {run_id} {run['status']}"
        if run["status"] != QUEUED:
            done = store.step_counts(run_id).get("main", 0)
            part += f", step {done}/{run['config'].get('steps')}"
        parts.append(part)
    return f"waited {ago(waited)}: " + "; ".join(parts)
