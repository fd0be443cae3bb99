"""The trainer's ``--log FILE``: its records, append-only, each step once.

With ``--log`` the records go to the file and nowhere else; stdout stays empty
and a person reads stderr. Without it they go to stdout, which is what both
launchers follow (the local one appends it to ``runs/<id>/output.log``,
Kubernetes keeps the pod's log).

A run resumed from a checkpoint trains again the steps past it that its
stopped attempt had already logged. Those records are not written twice: the
log keeps each step's (and each held-out loss's) first copy, as the store does
(``ON CONFLICT DO NOTHING``), so the two hold the same steps. On the CPU the
copies are the same losses bit for bit; only their timings differ.

Crash-safe by being append-only: nothing written is ever rewritten or
truncated, and what an earlier attempt logged is read from the file itself
when this process resumes, so a crash at any instant leaves a file the next
attempt reads right. A last line torn by a crash is ended with a newline
first, so the next record starts a line of its own; readers skip the fragment
(it does not parse as a record).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from trainer import records
from trainer.errors import UsageError
from trainer.records import MAIN, RESUME, Eval, Event, Record, Start, Step

#: Start-config keys that say two start records open the same pass of the same run: what
#: a checkpoint must match to be resumed (trainer/output/folder.py), the folder it lives in and
#: the run's id. A resumed pass writes its checkpoint's start config again, so they match.
SAME_PASS_KEYS = ("run_id", "out")


@dataclass
class _Earlier:
    """What the file held for one pass before this process: after that pass's newest
    start record, the step numbers of its steps and of its held-out losses."""

    config: dict
    steps: set[int] = field(default_factory=set)
    evals: set[int] = field(default_factory=set)


def open_log(path: str):
    """The ``--log`` writer (a ``RecordWriter``'s ``write``), or UsageError in one line."""
    try:
        return StepLog(path)
    except OSError as exc:
        why = "a symbolic link" if os.path.islink(path) else exc.strerror
        raise UsageError(f"cannot open --log {path}: {why}") from None


class StepLog:
    """Writes records to the ``--log`` file, leaving out the steps a resume redoes."""

    def __init__(self, path: str):
        self.path = path
        # Never through a final link: one planted where a log goes would have us write there.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o666)
        self.file = os.fdopen(fd, "a", buffering=1, encoding="utf-8")
        info = os.fstat(self.file.fileno())
        #: Bytes the file held before this process wrote: only those are an earlier attempt's.
        self._before = info.st_size if stat.S_ISREG(info.st_mode) else 0
        if self._before and not self._ends_a_line():
            self.file.write("\n")
        self._started: dict[str, dict] = {}  # label -> the start config this process wrote
        self._resumed_at: dict[str, int] | None = None  # the resume event's position
        self._earlier: dict[str, _Earlier] | None = None  # read at the resume, once

    def _ends_a_line(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(self._before - 1)
            return f.read(1) == b"\n"

    def write(self, record: Record) -> None:
        if self._logged_before(record):
            return
        if isinstance(record, Start):
            self._started[record.config_label or MAIN] = record.config
        elif isinstance(record, Event) and record.event == RESUME:
            self._resumed_at = dict(record.data.get("position") or {})
        self.file.write(records.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()

    def _logged_before(self, record: Record) -> bool:
        """A step or held-out loss, past the checkpoint this process resumed from, that the
        stopped attempt of the same pass already logged."""
        if self._resumed_at is None or not isinstance(record, (Step, Eval)):
            return False
        label = record.config_label
        if record.step <= self._resumed_at.get(label, 0):
            return False  # at or before the checkpoint: never trained twice
        earlier = self._earlier_passes().get(label)
        if earlier is None or not _same_pass(earlier.config, self._started.get(label)):
            return False
        return record.step in (earlier.steps if isinstance(record, Step) else earlier.evals)

    def _earlier_passes(self) -> dict[str, _Earlier]:
        if self._earlier is None:
            self._earlier = _read_passes(self.path, self._before)
        return self._earlier


def _read_passes(path: str, size: int) -> dict[str, _Earlier]:
    """Per pass label, what the first ``size`` bytes of the log hold after its newest start."""
    passes: dict[str, _Earlier] = {}
    with open(path, "rb") as f:
        data = f.read(size)
    for line in data.decode("utf-8", errors="replace").splitlines():
        record = records.parse_line(line)
        if isinstance(record, Start):
            passes[record.config_label or MAIN] = _Earlier(record.config)
        elif isinstance(record, (Step, Eval)) and record.config_label in passes:
            earlier = passes[record.config_label]
            (earlier.steps if isinstance(record, Step) else earlier.evals).add(record.step)
    return passes


def _same_pass(a: dict, b: dict | None) -> bool:
    from trainer.output.folder import RESUME_KEYS

    if b is None:
        return False
    return all(a.get(key) == b.get(key) for key in (*SAME_PASS_KEYS, *RESUME_KEYS))
