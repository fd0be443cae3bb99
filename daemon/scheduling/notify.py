"""Notifications: a command run without a shell when a run starts, ends, or is unblocked.

The scheduler calls ``Notifications.started / ended / gates_checked`` (one
line each); they store a ``notify`` event at once (the TUI rings on it) and,
when the run has a notifier command, hand the call to one worker thread. The
worker writes the run's note first (for an end), then runs the command with
``[notify] timeout`` under a keeper (notify_session.py) that ends, at the timeout,
everything the command started, ``setsid`` children included; one that is missing
or fails is a ``notify_failed`` event, with the last line of the bounded tail of its
stderr. Nothing here can block
a tick: the tick only queues, and the worker talks to the store through its
own connection. See docs/design.md, "Notifications".
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from daemon.errors import BadInput

log = logging.getLogger("rngdctl.notify")

#: The moments a notifier is called at, in the ``on`` field of a ``notify`` event.
START, FINISH, FAILURE, GATES_CLEARED = "start", "finish", "failure", "gates_cleared"
MOMENTS = (START, FINISH, FAILURE, GATES_CLEARED)
#: Event kinds (docs/design.md): every moment, and a notifier that did not succeed.
KIND, FAILED_KIND = "notify", "notify_failed"

#: What a notifier is told: ``{word}`` in its arguments, and the environment variable.
FIELDS = {
    "event": "RNGDCTL_EVENT",
    "id": "RNGDCTL_RUN_ID",
    "status": "RNGDCTL_STATUS",
    "name": "RNGDCTL_NAME",
    "median_step_s": "RNGDCTL_MEDIAN_STEP_S",
    "note": "RNGDCTL_NOTE",
    "reason": "RNGDCTL_REASON",
    "blocked_s": "RNGDCTL_BLOCKED_S",
}
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
#: What a notifier's words and output may not carry: NUL and the other control characters.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
STDERR_KEPT = 300  # characters of a failed notifier's stderr kept in its event


def parse_command(command, *, where: str = "--notify") -> list[str]:
    """A notifier's argv from a string (split as a shell splits words) or a list of words.

    [] means "no notifier". Unknown ``{placeholders}`` are refused here, at
    submit or config load, not when the notifier would run.
    """
    if command is None:
        return []
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise BadInput(f"{where}: cannot split {command!r} into words: {exc}") from None
    elif isinstance(command, list) and all(isinstance(w, str) for w in command):
        argv = list(command)
    else:
        raise BadInput(f"{where}: give a command as a string or a list of strings, "
                       f"got {command!r}")
    for word in argv:
        for name in _PLACEHOLDER.findall(word):
            if name not in FIELDS:
                raise BadInput(f"{where}: unknown placeholder {{{name}}} in {word!r} "
                               f"(known: {', '.join('{' + f + '}' for f in FIELDS)})")
    return argv


@dataclass(frozen=True)
class Notice:
    """One moment of one run, as the notifier is told it."""

    on: str
    run_id: int
    status: str
    name: str | None
    median_step_s: float | None = None
    reason: str | None = None
    blocked_s: float | None = None
    note: str | None = None

    def values(self) -> dict[str, str]:
        """Each field as the text the notifier gets ('' when unknown)."""
        def text(x) -> str:
            if x is None:
                return ""
            # No NUL (no argument or environment can hold one) nor any control character.
            return _CONTROL.sub("", f"{x:.6g}" if isinstance(x, float) else str(x))

        first = (self.reason or "").splitlines()[0] if self.reason else ""
        return {"event": self.on, "id": str(self.run_id), "status": self.status,
                "name": text(self.name), "median_step_s": text(self.median_step_s),
                "note": text(self.note), "reason": text(first),
                "blocked_s": text(self.blocked_s)}

    def message(self) -> str:
        who = f"run {self.run_id}" + (f" ({self.name})" if self.name else "")
        first = (self.reason or "").splitlines()[0] if self.reason else ""
        if self.on == START:
            return f"{who} started"
        if self.on == GATES_CLEARED:
            return f"{who}: gates cleared after {self.blocked_s / 60:.0f} m blocked"
        return f"{who} {self.status}" + (f": {first}" if first else "")


def argv_for(command: list[str], notice: Notice) -> list[str]:
    """The command with each known ``{placeholder}`` replaced by its value."""
    values = notice.values()
    return [_PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), w) for w in command]


def environment(notice: Notice, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.pop("RNGDCTL_FAULT", None)  # the daemon's crash-test hook is not the notifier's
    env.update({FIELDS[k]: v for k, v in notice.values().items()})
    return env


#: The keeper each notifier runs under (notify_session.py: it ends the whole session).
KEEPER = str(Path(__file__).with_name("notify_session.py"))
#: Bytes of a notifier's stderr kept, the last ones: it is read as it comes, never whole.
STDERR_TAIL_BYTES = 4096
#: Seconds past the timeout that the keeper gets to end what the notifier started.
KEEPER_GRACE_S = 10.0


def call(argv: list[str], env: dict[str, str], timeout: float) -> str | None:
    """Run the notifier to its end or ``timeout``; None if it succeeded, else why not.

    It runs under a keeper (notify_session.py) in a session of its own: at the
    timeout the keeper kills everything the notifier started, even what left its
    session. Of its stderr only the last STDERR_TAIL_BYTES are kept, read as they
    come, so no notifier can fill the daemon's memory.
    """
    try:
        keeper = subprocess.Popen([sys.executable, "-I", "-S", KEEPER, f"{timeout!r}", *argv],
                                  env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, start_new_session=True,
                                  close_fds=True)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in a word of the command
        return f"{argv[0]}: cannot run: {getattr(exc, 'strerror', None) or exc}"
    result, err = _read_tails(keeper, time.monotonic() + timeout + KEEPER_GRACE_S)
    if keeper.poll() is None:  # the keeper itself hung: end its whole session
        try:
            os.killpg(keeper.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    keeper.wait()
    return _why(argv, timeout, result, err)


def _read_tails(keeper: subprocess.Popen, until: float) -> tuple[bytes, bytes]:
    """The keeper's stdout (its one line) and the last bytes of the notifier's stderr,
    read until both end or ``until``."""
    import selectors

    kept = {keeper.stdout: bytearray(), keeper.stderr: bytearray()}
    with selectors.DefaultSelector() as selector:
        for pipe in kept:
            selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map() and (left := until - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                tail = kept[key.fileobj]
                tail += chunk
                del tail[:-STDERR_TAIL_BYTES]
    for pipe in kept:
        pipe.close()
    return bytes(kept[keeper.stdout]), bytes(kept[keeper.stderr])


def _why(argv: list[str], timeout: float, result: bytes, err: bytes) -> str | None:
    """What went wrong, from the keeper's line and the stderr's tail; None for success."""
    import json

    try:
        ended = json.loads(result.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"timed out after {timeout:g} s (killed)"  # the keeper was killed itself
    if ended.get("leftovers"):
        log.info("notifier %s left %d processes; ended at the timeout", argv[0],
                 ended["leftovers"])
    if ended.get("error") == "not_found":
        return f"{argv[0]}: command not found"
    if ended.get("error") == "permission":
        return f"{argv[0]}: permission denied (not executable?)"
    if ended.get("error"):
        return f"{argv[0]}: cannot run: {ended['error']}"
    if ended.get("timeout"):
        return f"timed out after {timeout:g} s (killed)"
    if ended.get("signal"):
        how = f"killed by signal {ended['signal']}"
    elif ended.get("exit"):
        how = f"exit code {ended['exit']}"
    else:
        return None
    text = _CONTROL.sub("", err.decode("utf-8", "replace")).strip()[-STDERR_KEPT:]
    last = text.splitlines()[-1].strip() if text else ""
    return how + (f": {last}" if last else "")


@dataclass
class _Job:
    notice: Notice
    command: list[str]


class Notifications:
    """Stores each moment's event; runs the notifiers on one worker thread.

    ``open_store()`` gives the worker its own store connection; ``write_note(store,
    run_id, run_dir)`` (given by the CLI, which owns the note) returns the note's
    path for an end, or None to pass no note.
    """

    def __init__(self, store, config, *, open_store, run_dir=None, write_note=None,
                 clock=time.time):
        self.store = store
        self.config = config  # [notify]
        self.default = parse_command(config.command, where="config.toml: [notify] command")
        self.open_store = open_store
        self.run_dir = run_dir
        self.write_note = write_note
        self.clock = clock
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # --- the scheduler's calls (each one cheap: store an event, queue a call) ---

    def started(self, run: dict, now: float | None = None) -> None:
        self._moment(run, START, "running", now=now)  # the launcher started it

    def ended(self, run: dict, status: str, reason: str | None, now: float | None = None) -> None:
        on = FINISH if status in ("done", "cancelled") else FAILURE
        self._moment(run, on, status, reason=reason, now=now,
                     median=self._median(run["id"]))

    def gates_checked(self, run: dict, *, passed: bool, blocked_since: float | None,
                      now: float) -> None:
        """After a gate check: the gates passed, and before that they blocked long enough."""
        if not passed or blocked_since is None:
            return
        blocked = now - blocked_since
        if blocked <= self.config.blocked_minutes * 60:
            return
        self._moment(run, GATES_CLEARED, run.get("status") or "queued", now=now,
                     blocked_s=blocked)

    # --- the worker ------------------------------------------------------------

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every queued call is done (tests, and close); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def close(self) -> None:
        """Let the calls queued so far finish (each is bounded by the timeout), then stop."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        pending = self._queue.qsize() + 1
        self._queue.put(None)
        thread.join(timeout=pending * (self.config.timeout + 30))
        if thread.is_alive():
            log.error("notifier calls still running at daemon stop; left to the thread")

    # --- plumbing --------------------------------------------------------------

    def _command(self, run: dict) -> list[str]:
        own = run.get("notify")
        if own is not None:  # '' turns the default off for this run
            return parse_command(own)
        return self.default

    def _median(self, run_id: int) -> float | None:
        from daemon.stepmodel import stats
        from trainer import records

        try:
            return stats.steady_medians(self.store, run_id, records.MAIN)[0]
        except Exception:  # the median is information; it must never stop the notice
            log.exception("median step time of run %s", run_id)
            return None

    def _moment(self, run: dict, on: str, status: str, *, now: float | None = None,
                reason: str | None = None, median: float | None = None,
                blocked_s: float | None = None) -> None:
        try:
            command = self._command(run) if on in self.config.on else []
        except BadInput as exc:  # stored before this check existed: say so, notify nobody
            command = []
            self.store.add_event(run["id"], FAILED_KIND, f"notifier not run: {exc}",
                                 data={"on": on, "command": run.get("notify"),
                                       "why": str(exc)}, now=now)
        notice = Notice(on, run["id"], status, run.get("name"), median_step_s=median,
                        reason=reason, blocked_s=blocked_s)
        data = {"on": on, "status": status, "name": run.get("name"), "median_step_s": median,
                "blocked_s": blocked_s, "command": command or None}
        self.store.add_event(run["id"], KIND, notice.message(), data=data, now=now)
        if command:
            self._start()
            self._queue.put(_Job(notice, command))

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="rngdctl-notify",
                                                daemon=True)
                self._thread.start()

    def _work(self) -> None:
        store = None
        try:
            try:
                store = self.open_store()
            except Exception:  # the calls cannot store their failures: run them anyway
                log.exception("the notifier's store connection")
            while True:
                job = self._queue.get()
                try:
                    if job is None:
                        return
                    self._run(store, job)
                except Exception:  # one bad call must not stop the later ones
                    log.exception("notifier call failed")
                finally:
                    self._queue.task_done()
        finally:
            if store is not None:
                store.close()

    def _run(self, store, job: _Job) -> None:
        notice = job.notice
        if notice.on in (FINISH, FAILURE) and self.write_note is not None:
            notice = self._with_note(store, notice, job.command)
        argv = argv_for(job.command, notice)
        why = call(argv, environment(notice), self.config.timeout)
        if why is not None:
            log.warning("notifier for run %s (%s) failed: %s", notice.run_id, notice.on, why)
            if store is None:
                return
            store.add_event(notice.run_id, FAILED_KIND,
                            f"notifier {shlex.join(argv)} ({notice.on}) failed: {why}",
                            data={"on": notice.on, "command": argv, "why": why},
                            now=self.clock())

    def _with_note(self, store, notice: Notice, command: list[str]) -> Notice:
        if store is None:
            return notice
        try:
            path = self.write_note(store, notice.run_id, Path(self.run_dir(notice.run_id)))
        except Exception as exc:  # the notifier still runs, told there is no note
            log.exception("writing the note of run %s", notice.run_id)
            store.add_event(notice.run_id, FAILED_KIND, f"the note for the notifier could not "
                            f"be written: {exc}", data={"on": notice.on, "command": command,
                                                        "why": f"note: {exc}"},
                            now=self.clock())
            return notice
        return dataclasses.replace(notice, note=str(path) if path else None)
