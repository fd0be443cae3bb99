"""The TensorBoard tracker: each run's event files in ``DIR/run-<id>[-<name>]/``.

The main pass's events go in the run's folder and each other pass's (the baseline) in a
folder inside it, so TensorBoard shows them as two runs with the same tags. The run
folder is claimed for the run (trainer/ownership.py: ``rngdctl.json``), so rngdctl never
writes into a folder it did not make, and a second home or run never writes into it.

**Exactly once.** A pass has one event file, appended to. Its cursor in the store holds
the last step and evaluation written and the file's size at that point; every write
happens under an exclusive ``flock`` on the file (the daemon and an ``export`` may share
a folder), re-reads the cursor there, and first cuts the file back to that size: bytes
written past it were never counted (a process killed between its write and its cursor).
A file shorter than its cursor (lost, or cut by someone else) is written again whole.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from collections.abc import Callable
from pathlib import Path

from daemon.trackers import tfevents
from daemon.trackers.points import Ending, hyperparameters
from daemon.trackers.send import Batch, Busy
from trainer import ownership, records

#: The name of each pass's event file (TensorBoard reads any file with "tfevents" in it).
EVENTS = "events.out.tfevents.{time}.rngdctl"
KIND = "tensorboard"


def key_of(folder: str | Path) -> str:
    return f"{KIND}:{os.path.abspath(os.path.expanduser(folder))}"


def run_folder_name(run: dict) -> str:
    return f"run-{run['id']}" + (f"-{run['name']}" if run.get("name") else "")


def _pass_folder(label: str) -> str:
    """A pass's folder inside the run's ('' for the main pass): its label, made safe."""
    return "" if label == records.MAIN else re.sub(r"[^A-Za-z0-9_-]", "_", label)[:60] or "_"


class TensorBoard:
    """Writes runs' event files under ``folder``; ``mode`` the run folders' (the home's
    ``[daemon] output_mode``)."""

    def __init__(self, folder: str | Path, *, mode: int = ownership.DEFAULT_MODE):
        self.folder = Path(os.path.abspath(os.path.expanduser(folder)))
        self.key = key_of(self.folder)
        self.mode = mode
        self.file_mode = ownership.file_mode(mode)

    def __repr__(self) -> str:
        return f"TensorBoard {self.folder}"

    # === the run's folder ====================================================

    def where(self, store, run: dict) -> str:
        """Where the run is there, in words: its folder."""
        return str(self._run_folder(store, run, make=False))

    def begin(self, store, run: dict) -> None:
        state = store.tracker_run(self.key, run["id"])
        if state["ended"] is not None and run.get("ended") is None:  # resumed: ends again
            store.set_tracker_run(self.key, run["id"], ended=None)
        self._run_folder(store, run)

    def _run_folder(self, store, run: dict, *, make: bool = True) -> Path:
        """The run's folder: where its main pass's file is, else DIR/run-<id>[-<name>];
        made and claimed when missing (``make``)."""
        cursor = store.tracker_pass(self.key, run["id"], records.MAIN)
        folder = (Path(cursor["file"]).parent if cursor["file"]
                  else self.folder / run_folder_name(run))
        if make and (cursor["file"] is None or not os.path.isdir(folder)):
            self._claim(store, run, folder)  # a folder not written yet is checked first
        return folder

    def _claim(self, store, run: dict, folder: Path) -> None:
        if os.path.lexists(self.folder):
            ownership.check_private(self.folder, "TensorBoard folder")
        else:
            self.folder.mkdir(parents=True, mode=0o700)
        owner = ownership.Owner(str(run["id"]), store.home_id)
        ownership.check_output(folder, owner, what="TensorBoard folder")
        ownership.claim(folder, owner, mode=self.mode)

    # === a pass's events =====================================================

    def send_pass(self, store, run: dict, label: str, read: Callable[[dict], Batch]) -> Batch:
        folder = self._run_folder(store, run)
        if _pass_folder(label):
            folder = folder / _pass_folder(label)
            if not os.path.isdir(folder):
                folder.mkdir(mode=self.mode)
        path = folder / _events_name(run)
        fd = ownership.open_regular(path, os.O_RDWR | os.O_CREAT, mode=self.file_mode,
                                    what="event file")
        try:
            _lock(fd, path)
            return self._append(store, run, label, fd, path, read)
        finally:
            os.close(fd)

    def _append(self, store, run: dict, label: str, fd: int, path: Path,
                read: Callable[[dict], Batch]) -> Batch:
        cursor = store.tracker_pass(self.key, run["id"], label)  # under the lock: current
        size = os.fstat(fd).st_size
        head = b""
        if cursor["file"] != str(path) or cursor["size"] is None or size < cursor["size"]:
            cursor = self._start_over(store, run, label, cursor)
            head = self._head(store, run, label)
            kept = 0
        else:
            kept = cursor["size"]
        batch = read(cursor)
        data = head + b"".join(tfevents.scalars_event(_wall(p.time, run), p.step, p.values)
                               for p in (*batch.steps, *batch.evals))
        if not data and size == kept:
            return batch  # nothing new: no write, no cursor to store
        end = _write_at(fd, kept, data)
        store.set_tracker_pass(self.key, run["id"], label, step=batch.step,
                               eval_step=batch.eval_step, file=str(path), size=end)
        return batch

    def _start_over(self, store, run: dict, label: str, cursor: dict) -> dict:
        """A pass whose file is new, lost or shorter than its cursor: written again whole;
        the main pass's end goes in again after it."""
        if cursor["file"] is not None:
            store.forget_tracker_pass(self.key, run["id"], label)
        if label == records.MAIN:
            store.set_tracker_run(self.key, run["id"], ended=None)
        return store.tracker_pass(self.key, run["id"], label)

    def _head(self, store, run: dict, label: str) -> bytes:
        """What a pass's file starts with: the version, and the run's config in the main's."""
        started = float(run.get("started") or run["created"])
        head = tfevents.version_event(started)
        if label == records.MAIN:
            head += tfevents.session_start_event(started, hyperparameters(store, run),
                                                 group=run_folder_name(run))
        return head

    # === the end =============================================================

    def finish(self, store, run: dict, end: Ending) -> None:
        """The step model's verdict at the main pass's last step, the note as a text
        summary there, and how the run ended (the hparams plugin's session end)."""
        step, wall = end.last_step, end.ended
        data = b""
        if end.model:
            data += tfevents.scalars_event(wall, step, end.model)
        if end.note is not None:
            data += tfevents.text_event(wall, step, "note", end.note[1])
        status = tfevents.STATUS_SUCCESS if end.succeeded else tfevents.STATUS_FAILURE
        data += tfevents.session_end_event(wall, status)
        path = self._run_folder(store, run) / _events_name(run)
        fd = ownership.open_regular(path, os.O_RDWR, what="event file")
        try:
            _lock(fd, path)
            cursor = store.tracker_pass(self.key, run["id"], records.MAIN)
            if cursor["file"] != str(path) or os.fstat(fd).st_size < (cursor["size"] or 0):
                raise Busy(path)  # lost since its steps went in: written again first
            size = _write_at(fd, cursor["size"], data)
            store.set_tracker_pass(self.key, run["id"], records.MAIN, step=cursor["step"],
                                   eval_step=cursor["eval_step"], file=str(path), size=size,
                                   ended=end.ended)
        finally:
            os.close(fd)


def _lock(fd: int, path: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise Busy(path) from None
        raise


def _write_at(fd: int, offset: int, data: bytes) -> int:
    """Cut the file to ``offset``, write ``data`` there; the file's new size. Flushed to
    the system, not synced: a power cut that loses the tail leaves a file shorter than its
    cursor, which is written again whole."""
    os.ftruncate(fd, offset)
    view, at = memoryview(data), offset
    while view:
        n = os.pwrite(fd, view, at)
        view, at = view[n:], at + n
    return at


def _events_name(run: dict) -> str:
    """A pass's event file: named by when the run was made, which never changes (a retry
    starts the run again, not its file)."""
    return EVENTS.format(time=int(run["created"]))


def _wall(time: float | None, run: dict) -> float:
    return float(time if time is not None else run.get("started") or run["created"])
