"""The local launcher: the trainer as a child process of this host.

The child runs in its own process group with its output going straight to the
run's log file, so it outlives a daemon that dies; a restarted daemon finds it
again by pid and process start time and goes on reading the file from the
offset the store kept.

Never two trainers: before the child exists, the daemon takes an exclusive
flock on ``runs/<id>/trainer.lock`` and hands that open file to the child,
then closes its own copy. The lock is held from the fork on, before the
trainer can write a line, for exactly as long as the trainer (or a process it
forked) lives. A daemon that died before storing the pid finds the trainer
from disk: lock held means a trainer lives (adopt the process that holds the
file, or wait for it to show); lock free means none does, and none will.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from daemon import faults
from daemon.errors import LaunchError
from daemon.gates.rules import ClusterReading
from daemon.home import Config, Home
from daemon.launchers import retry
from daemon.launchers.base import REQUEUE, Outcome
from daemon.run.ingest import Ingest
from daemon.run.spec import output_dir, trainer_argv
from daemon.store import RUNNING, Store
from trainer import records
from trainer.ownership import NotOurs, open_regular
from trainer.records import LineSplitter

# The trainer's stdout (its records) and stderr (human lines): what ingest follows. No
# --log: with it the trainer writes its records there alone, and one stream, appended and
# read from a stored offset, is what keeps every step stored once across crashes.
OUTPUT_LOG = "output.log"
TRAINER_LOCK = "trainer.lock"  # flock-held by the run's trainer for as long as it lives
TAIL_LINES = 20
#: What one follow reads of a run's log at most: a trainer that writes faster is read on
#: in the next ticks, so that every tick ends and acts on cancels and deadlines (issue 36:
#: a trainer writing 10,000 lines a second held the daemon in one tick). The time is
#: also at most half a tick; chunks are small enough to stop close to it.
READ_BUDGET_BYTES = 8 << 20
READ_BUDGET_S = 1.0
READ_CHUNK = 256 << 10


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last plain (non-record) lines of a log, for a failure's reason."""
    try:
        with os.fdopen(open_regular(path, what="log"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except (OSError, NotOurs):
        return ""
    plain = [line for line in text.splitlines()
             if line.strip() and isinstance(records.parse_line(line), records.LogLine)]
    return "\n".join(plain[-lines:])


def _kept(end: dict) -> str:
    """'; checkpoint PATH kept' when the trainer's end record names one."""
    return f"; checkpoint {end['checkpoint']} kept" if end.get("checkpoint") else ""


# === the trainer's lock ======================================================


def take_trainer_lock(path: Path) -> int:
    """An fd holding the exclusive flock on ``path``; LaunchError if a trainer holds it."""
    try:
        fd = open_regular(path, os.O_RDWR | os.O_CREAT, what="lock file")
    except NotOurs as exc:
        raise LaunchError(f"cannot lock the run: {exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            raise LaunchError(f"a trainer for this run still holds {path}") from None
        raise LaunchError(f"cannot lock {path}: {exc.strerror}") from None
    return fd


def trainer_lock_held(path: Path) -> bool:
    """Whether a live process holds ``path``'s flock (False when there is no file)."""
    if not os.path.lexists(path):
        return False
    fd = open_regular(path, what="lock file")  # NotOurs for a link: following it fails
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases our lock, if we got it
    return False


def lock_holder(path: Path) -> psutil.Process | None:
    """The process that holds ``path`` open and whose parent does not: the trainer.

    Found by its open files (/proc/PID/fd), so it is found even between fork
    and exec, before it has a command line of its own.
    """
    target = os.path.realpath(path)
    holders: dict[int, psutil.Process] = {}
    for process in psutil.process_iter():
        try:
            if any(f.path == target for f in process.open_files()):
                holders[process.pid] = process
        except psutil.Error:
            continue
    roots = []
    for process in holders.values():
        try:
            if process.ppid() not in holders:
                roots.append((process.create_time(), process))
        except psutil.Error:
            continue
    return min(roots, key=lambda r: r[0])[1] if roots else None


class LocalLauncher:
    name = "local"
    runs_per_node = None  # one trainer on this host at a time

    def __init__(self, *, home: Home, store: Store, config: Config, ingest: Ingest,
                 python: str | None = None, clock=time.time):
        self.home = home
        self.store = store
        self.config = config
        self.ingest = ingest
        self.python = python or sys.executable
        self.clock = clock
        self._children: dict[int, subprocess.Popen] = {}
        self._processes: dict[int, psutil.Process] = {}
        self._cancel_sent: dict[int, float] = {}
        self._stop_sent: dict[int, float] = {}  # SIGTERM sent (a cancel or the deadline): when
        self._killed: set[int] = set()
        self._timed_out: set[int] = set()
        self._waiting: set[int] = set()  # claimed runs whose trainer holds its lock, unseen
        #: When each run was first seen ended while its log was still being read to its end.
        self._ended_at: dict[int, float] = {}
        self._read_budget_s = min(READ_BUDGET_S, config.daemon.tick / 2)

    # --- gates ---------------------------------------------------------------

    def cluster_reading(self, run: dict) -> ClusterReading:
        return ClusterReading(
            cards_detail="local launcher: the trainer runs on this host, no Kubernetes cards",
            image_detail="local launcher: runs the installed trainer, no image",
        )

    def own_pids(self) -> set[int]:
        pids: set[int] = set()
        for process in self._processes.values():
            try:
                pids.add(process.pid)
                pids.update(c.pid for c in process.children(recursive=True))
            except psutil.Error:
                continue
        return pids

    def node_pods(self) -> tuple[str | None, list[dict] | None, str | None]:
        """This host, and no pods: the local launcher knows no Kubernetes."""
        return socket.gethostname(), None, None

    # --- start ---------------------------------------------------------------

    def launch(self, run: dict) -> None:
        run_dir = self.home.run_dir(run["id"])
        output = run_dir / OUTPUT_LOG
        argv = trainer_argv(run, log_path=None, python=self.python,
                            cache_dir=str(self.home.cache_dir),
                            out_dir=str(output_dir(run, self.home.path / "runs")),
                            on_checkpoint_error=self.config.daemon.checkpoint_failure,
                            home_id=self.store.home_id,
                            output_mode=self.config.daemon.output_mode)
        env = {k: v for k, v in os.environ.items() if k != faults.ENV}
        env["PYTHONUNBUFFERED"] = "1"
        lock = take_trainer_lock(run_dir / TRAINER_LOCK)
        child = None
        try:
            out = open_regular(output, os.O_WRONLY | os.O_APPEND | os.O_CREAT, what="log")
            try:
                offset = os.fstat(out).st_size
                # pass_fds: the child inherits the locked file before it exists as
                # a trainer, so no instant has a trainer that the lock does not name.
                child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env=env, close_fds=True, pass_fds=(lock,))
            finally:
                os.close(out)
            process = psutil.Process(child.pid)
            started = process.create_time()
        except NotOurs as exc:
            raise LaunchError(f"cannot start the trainer: {exc}") from None
        except (OSError, psutil.Error) as exc:
            if child is not None:  # it must not run on while the run is failed
                child.kill()
                child.wait()
            raise LaunchError(f"cannot start the trainer: {exc}") from None
        finally:
            os.close(lock)  # the child's copy holds the lock now
        faults.point("after_spawn")
        self._children[run["id"]] = child
        self._processes[run["id"]] = process
        # A retry appends to the same file: this attempt's lines start where it ends now.
        self.store.update_run(run["id"], status=RUNNING, pid=child.pid, pid_start=started,
                              log_path=str(output), log_offset=offset)
        faults.point("after_record")
        self.store.add_event(run["id"], "launch", f"local pid {child.pid}: {' '.join(argv[1:])}")

    # --- follow --------------------------------------------------------------

    def _read_new(self, run: dict) -> bool:
        """Ingest the log from the stored offset, at most READ_BUDGET_BYTES and the read's
        time budget; whether it read to the end (a missing log has no more to read)."""
        path = run.get("log_path")
        if not path or not os.path.lexists(path):
            return True
        splitter = LineSplitter(run.get("log_offset") or 0)
        until = time.monotonic() + self._read_budget_s
        read, at_end = 0, False
        try:
            with os.fdopen(open_regular(Path(path), what="log"), "rb") as f:
                f.seek(splitter.offset)
                while read < READ_BUDGET_BYTES and time.monotonic() < until:
                    chunk = f.read(min(READ_CHUNK, READ_BUDGET_BYTES - read))
                    if not chunk:
                        at_end = True
                        break
                    read += len(chunk)
                    lines = splitter.feed(chunk)
                    if lines:
                        self.ingest.feed(run["id"], lines)
                    # Store the offset only after the lines are stored: a crash in
                    # between re-reads them, and ingest ignores what it already has.
                    self.store.update_run(run["id"], log_offset=splitter.offset)
        except NotOurs as exc:
            raise LaunchError(f"cannot read the run's log: {exc}") from None
        run["log_offset"] = splitter.offset
        return at_end

    def _alive(self, run: dict) -> bool:
        child = self._children.get(run["id"])
        if child is not None:
            return child.poll() is None
        process = self._processes.get(run["id"])
        if process is None:
            return False
        try:
            return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def follow(self, run: dict) -> Outcome | None:
        run_id = run["id"]
        if not run.get("pid") and run_id not in self._children:
            # Claimed, but no pid stored: a restarted daemon waits for the trainer
            # that holds the run's lock, or learns that none ever will.
            outcome = self._find_unrecorded(run)
            if outcome is not None or not run.get("pid"):
                return outcome
        if run_id not in self._ended_at:
            self._read_new(run)
            if self._alive(run):
                self._enforce_deadline(run)
                self._escalate_stop(run)
                return None
        # It ended: stamped now, though its log may take more ticks to read to the end.
        ended = self._ended_at.setdefault(run_id, self.clock())
        if not self._read_new(run):  # whatever it wrote between the read and its exit
            return None
        child = self._children.pop(run_id, None)
        self._processes.pop(run_id, None)
        exit_code = child.returncode if child is not None else None
        return self._ended(run, self._outcome(run, exit_code), ended)

    def _end_event(self, run: dict) -> dict | None:
        """This attempt's end record's event: not one an earlier try of a retried run wrote."""
        ends = [e for e in self.store.events(run_id=run["id"], kinds=["end"])
                if e["time"] >= (run.get("started") or 0) - 1.0]
        return ends[-1] if ends else None

    def _end_record(self, run: dict) -> dict | None:
        end = self._end_event(run)
        return (end.get("data") or {}) if end is not None else None

    def _ended(self, run: dict, outcome: Outcome, seen: float) -> Outcome:
        """The outcome stamped with when the run ended: its end record's time, else when
        it was first seen ended (a log read to its end later does not move it)."""
        self._ended_at.pop(run["id"], None)
        end = self._end_event(run)
        when = end["time"] if end is not None and end["time"] <= seen else seen
        return dataclasses.replace(outcome, ended=when)

    def _outcome(self, run: dict, exit_code: int | None) -> Outcome:
        run_id = run["id"]
        end = self._end_record(run) or {}
        status = end.get("status")
        cancelled = run_id in self._cancel_sent or run.get("cancel_requested")
        self._cancel_sent.pop(run_id, None)
        self._stop_sent.pop(run_id, None)
        self._killed.discard(run_id)
        kept = _kept(end)
        if run_id in self._timed_out:
            self._timed_out.discard(run_id)
            return Outcome("timeout", f"deadline of {run['config'].get('deadline')} s passed"
                           + kept, exit_code)
        if cancelled and (status in ("cancelled", "preempted")
                          or exit_code in (-signal.SIGTERM, -signal.SIGKILL)):
            return Outcome("cancelled", "cancelled by request" + kept, exit_code)
        if status == "preempted":  # a SIGTERM that was not ours: go on from the checkpoint
            reason = f"stopped by a SIGTERM that rngdctl did not send{kept}"
            verdict = retry.decide(retry.PREEMPTED if end.get("checkpoint") else None,
                                   tries=int(run.get("attempts") or 0),
                                   limit=retry.max_attempts(self.config),
                                   evidence="the trainer wrote a checkpoint to go on from")
            if verdict.retry:
                return Outcome(REQUEUE, reason, exit_code, retry=verdict.event(reason))
            return Outcome("failed", verdict.failed_reason(reason), exit_code)
        if status == "oom" or exit_code == records.EXIT_OOM:
            return Outcome("oom", end.get("error") or "out of memory", exit_code)
        if exit_code == -signal.SIGKILL:
            return Outcome("oom", "killed by SIGKILL (the kernel's OOM killer, most likely)",
                           exit_code)
        if exit_code == 0 or (exit_code is None and status == "ok"):
            return Outcome("done", None, exit_code)
        if exit_code is None and status is None:
            reason = "the trainer exited while no daemon watched it, and wrote no end record"
        else:
            reason = end.get("error") or f"exit code {exit_code}"
        if retry.card_held(end.get("error")):
            verdict = retry.decide(retry.FOREIGN_HOLDER, tries=int(run.get("attempts") or 0),
                                   limit=retry.max_attempts(self.config),
                                   evidence="another process held the card when the trainer "
                                            "started")
            if verdict.retry:
                return Outcome(REQUEUE, reason, exit_code, retry=verdict.event(reason))
        tail = log_tail(Path(run["log_path"])) if run.get("log_path") else ""
        return Outcome("failed", f"{reason}\n{tail}".strip(), exit_code)

    # --- stop ----------------------------------------------------------------

    def _signal(self, run: dict, sig: int) -> None:
        try:
            os.killpg(run["pid"], sig)
        except (ProcessLookupError, PermissionError):
            pass

    def cancel(self, run: dict) -> None:
        if run["id"] in self._cancel_sent or not run.get("pid"):
            return
        self._cancel_sent[run["id"]] = self.clock()
        self._stop(run)
        self.store.add_event(run["id"], "cancel", f"SIGTERM sent to process group {run['pid']}"
                             f": it stops after its step and a checkpoint; SIGKILL after "
                             f"{self.config.daemon.stop_grace_s:g} s")

    def _stop(self, run: dict) -> None:
        """SIGTERM now, once; SIGKILL when it still runs ``stop_grace_s`` later."""
        if run["id"] not in self._stop_sent:
            self._stop_sent[run["id"]] = self.clock()
            self._signal(run, signal.SIGTERM)

    def abandon(self, run: dict) -> None:
        """The daemon gave up on the run: SIGKILL its process group, forget it."""
        if run.get("pid"):
            self._signal(run, signal.SIGKILL)
            self.store.add_event(run["id"], "abandon", f"SIGKILL sent to process group "
                                 f"{run['pid']}: the daemon cannot follow the run")
        child = self._children.pop(run["id"], None)
        self._processes.pop(run["id"], None)
        self._ended_at.pop(run["id"], None)
        if child is not None:
            try:
                child.wait(timeout=5)  # reap it, so no zombie counts as a device holder
            except subprocess.TimeoutExpired:
                pass

    def _escalate_stop(self, run: dict) -> None:
        sent = self._stop_sent.get(run["id"])
        overdue = sent is not None and self.clock() - sent > self.config.daemon.stop_grace_s
        if overdue and run["id"] not in self._killed:
            self._killed.add(run["id"])
            self._signal(run, signal.SIGKILL)
            self.store.add_event(run["id"], "cancel" if run["id"] in self._cancel_sent
                                 else "deadline", f"SIGKILL: still running "
                                 f"{self.config.daemon.stop_grace_s:g} s after SIGTERM")

    def _enforce_deadline(self, run: dict) -> None:
        deadline = run["config"].get("deadline")
        if not deadline or run["id"] in self._timed_out or not run.get("started"):
            return
        if self.clock() - run["started"] > deadline:
            self._timed_out.add(run["id"])
            self._stop(run)
            self.store.add_event(run["id"], "deadline", f"deadline of {deadline} s passed; "
                                 f"SIGTERM sent: it stops after its step and a checkpoint")

    # --- daemon restart ------------------------------------------------------

    def recover(self, run: dict) -> Outcome | None:
        if not run.get("pid"):
            return self._find_unrecorded(run)
        try:
            process = psutil.Process(run["pid"])
            same = abs(process.create_time() - (run.get("pid_start") or 0)) < 0.01
        except psutil.Error:
            same = False
        if same:
            self._processes[run["id"]] = process
            self.store.add_event(run["id"], "adopt", f"daemon restarted; adopted pid {run['pid']}"
                                 f" at log offset {run.get('log_offset') or 0}")
            return None
        return self._judge_ended(run)

    def _judge_ended(self, run: dict) -> Outcome | None:
        """A run whose trainer ended while no daemon watched: its outcome once its log is
        read to the end; until then follow() reads on (its process is gone)."""
        ended = self._ended_at.setdefault(run["id"], self.clock())
        if not self._read_new(run):
            return None
        return self._ended(run, self._outcome(run, None), ended)

    def _find_unrecorded(self, run: dict) -> Outcome | None:
        """The daemon died after claiming the run and before storing its trainer's pid.

        Lock held: a trainer lives; adopt it (``run`` gets its pid) or, if its
        holder cannot be seen yet, wait (None, no pid). Lock free: no trainer
        lives or ever will; judge the run from its log, or requeue it when the
        log is empty (no trainer ever wrote a line).
        """
        run_id, run_dir = run["id"], self.home.run_dir(run["id"])
        output = run_dir / OUTPUT_LOG
        if trainer_lock_held(run_dir / TRAINER_LOCK):
            process = lock_holder(run_dir / TRAINER_LOCK)
            if process is None:
                if run_id not in self._waiting:
                    self._waiting.add(run_id)
                    self.store.add_event(run_id, "adopt", f"waiting for the trainer that holds "
                                         f"{run_dir / TRAINER_LOCK} to show itself")
                return None
            try:
                started = process.create_time()
            except psutil.Error:
                return None  # it just ended; the next tick finds the lock free
            self._waiting.discard(run_id)
            self._processes[run_id] = process
            offset = run.get("log_offset") or 0
            run.update(status=RUNNING, pid=process.pid, pid_start=started,
                       log_path=str(output), log_offset=offset)
            self.store.update_run(run_id, status=RUNNING, pid=process.pid, pid_start=started,
                                  log_path=str(output), log_offset=offset)
            self.store.add_event(run_id, "adopt", f"daemon restarted; adopted pid "
                                 f"{process.pid}, found holding {TRAINER_LOCK} (its pid was "
                                 f"never stored)")
            return None
        self._waiting.discard(run_id)
        try:
            empty = output.stat().st_size == 0
        except FileNotFoundError:
            empty = True
        if empty:
            return Outcome(REQUEUE, "the daemon stopped before the trainer started")
        run["log_path"] = str(output)
        self.store.update_run(run_id, log_path=str(output))
        return self._judge_ended(run)

    def startup(self) -> None:
        return None

    def close(self) -> None:
        # Running trainers are left alone: the next daemon adopts them.
        self._children.clear()
        self._processes.clear()
