"""Sending one run to one tracker, from the store, from where its cursors stand.

The daemon's worker (worker.py) and ``rngdctl export --tensorboard/--mlflow`` both call
``send_run``; a tracker (``Sink``: tensorboard.py, mlflow.py) only writes what it is
given and stores its cursor once the tracker has it. Each call sends at most ``limit``
steps of each pass, so a call is bounded whatever the run's length; the run's end goes
in once every pass is caught up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from daemon.errors import BadInput, TrackerError
from daemon.trackers.points import BATCH_STEPS, Ending, Point, ending, eval_point, step_point


class Unreachable(TrackerError):
    """The tracker cannot be reached (refused, timed out, a 5xx): it is retried later, with
    every point kept in the store; not the run's fault."""


class Busy(TrackerError):
    """Another writer (the daemon, or an ``export``) is sending this pass now."""


@dataclass(frozen=True)
class Batch:
    """A pass's points after its cursor, and the cursor once they are sent."""

    steps: list[Point]
    evals: list[Point]
    step: int
    eval_step: int
    full: bool  # the read stopped at its limit: more may follow

    def __len__(self) -> int:
        return len(self.steps) + len(self.evals)


def read_batch(store, run_id: int, label: str, cursor: dict, limit: int) -> Batch:
    """Up to ``limit`` steps after ``cursor['step']``, and the evaluations up to the last
    of them (all of them once the steps are caught up), so each tag's steps go in order."""
    rows = store.tracked_steps(run_id, label, after=cursor["step"], limit=limit)
    full = len(rows) == limit
    step = rows[-1][0] if rows else cursor["step"]
    evals = [e for e in store.evals(run_id, label, after_step=cursor["eval_step"])
             if not full or e["step"] <= step]
    if len(evals) > limit:
        evals, full = evals[:limit], True
    eval_step = evals[-1]["step"] if evals else cursor["eval_step"]
    return Batch([step_point(r) for r in rows], [eval_point(e) for e in evals], step, eval_step,
                 full)


class Sink(Protocol):
    """A tracker: where the points go. Raises ``Unreachable`` when it cannot be reached,
    ``Busy`` when another writer holds the pass, anything else for a fault of this run's."""

    key: str  # names the tracker in the store: "tensorboard:<folder>", "mlflow:<uri>"

    def begin(self, store, run: dict) -> None:
        """Make sure the run is there (a folder, a tracked run), with its config."""

    def send_pass(self, store, run: dict, label: str,
                  read: Callable[[dict], Batch]) -> Batch:
        """Send ``read(cursor)`` of the pass and store the cursor after it."""

    def finish(self, store, run: dict, end: Ending) -> None:
        """Send the run's end and store that it went in."""

    def where(self, store, run: dict) -> str:
        """Where the run is there, in words (a folder, a page)."""


@dataclass(frozen=True)
class Sent:
    points: int  # steps and evaluations sent (the end counts one)
    more: bool  # some is left: a pass past this call's limit, or a pass another writer held


def send_run(store, sink: Sink, run: dict, *, note=None, limit: int = BATCH_STEPS) -> Sent:
    """Send the next points of ``run`` to ``sink``, and its end once all are in.

    ``note(store, run_id) -> (file name, markdown)`` writes the run's note for its end.
    """
    run_id = run["id"]
    sink.begin(store, run)
    points, more = 0, False
    for label in store.pass_labels(run_id):
        try:
            batch = sink.send_pass(store, run, label, lambda cursor, label=label: read_batch(
                store, run_id, label, cursor, limit))
        except Busy:
            more = True
            continue
        points += len(batch)
        more = more or batch.full
    if more or store.tracker_run(sink.key, run_id)["ended"] == run.get("ended"):
        return Sent(points, more)
    end = ending(store, run, note)
    if end is not None:
        sink.finish(store, run, end)
        points += 1
    return Sent(points, False)


#: Seconds ``send_all`` waits for another writer of the same pass (the daemon's batch).
BUSY_WAIT_S = 30.0


def send_all(store, sink: Sink, run: dict, *, note=None, wait_s: float = BUSY_WAIT_S,
             clock=time.monotonic, sleep=time.sleep) -> int:
    """Send every point of ``run`` stored so far, and its end if it ended (``rngdctl
    export``); how many went. One line for what stops it: ``Unreachable`` or ``MLflowError``
    (TrackerError), BadInput for a folder that is not ours to write, TrackerError for a pass
    another writer holds past ``wait_s`` or a file the system refused."""
    from trainer.ownership import NotOurs

    total, waited_since = 0, None
    while True:
        try:
            sent = send_run(store, sink, run, note=note)
        except NotOurs as exc:
            raise BadInput(f"{sink!r}: {exc}") from None
        except OSError as exc:
            raise TrackerError(f"{sink!r}: run {run['id']}: {exc.strerror or exc}") from None
        total += sent.points
        if not sent.more:
            return total
        if sent.points:
            waited_since = None
            continue
        waited_since = waited_since if waited_since is not None else clock()
        if clock() - waited_since > wait_s:
            raise TrackerError(f"{sink!r}: run {run['id']} is being written by another "
                               f"writer (the daemon?) for more than {wait_s:g} s: try again")
        sleep(0.2)
