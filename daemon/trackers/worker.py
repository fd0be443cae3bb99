"""The daemon's trackers: one worker thread sends every run, from the store, off the tick.

The tick only ``poke``s the worker (an event set: no network call, no file written, no
wait); the worker reads what ingest stored through its own store connection and sends
it (send.py), ``BATCH_STEPS`` steps per pass and run at a time (one MLflow request). Ingest
is never slowed by it: a round stops once it used ``ROUND_CPU_S`` of CPU time per tracker
(the next one starts with the runs this one did not reach), the worker then rests so that
it holds the interpreter at most ``DUTY`` of the time (its own CPU time, measured), and it
never holds a write transaction while it talks to a tracker.

A tracker that cannot be reached is one ``tracker_failed`` event, again at most every
``SAY_AGAIN_S`` while it stays down, and a ``tracker_back`` event when it answers again;
it is retried with a backoff doubling from ``BACKOFF_S`` to ``BACKOFF_MOST_S``. Its
cursors stay where they were, so it catches up with every step once it is back. A fault
of one run's (a folder another run claims, a value the server refuses) backs off that
run alone, with one event on the run likewise.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from daemon.trackers.send import Busy, Unreachable, send_run

log = logging.getLogger("rngdctl.trackers")

#: The share of its time the worker may hold the CPU while it catches up.
DUTY = 0.05
#: CPU seconds a round may use per tracker before it stops; the rest comes next round.
ROUND_CPU_S = 0.005
#: Steps per pass sent at once: a step is about 12 MLflow metrics, a request takes 1,000.
BATCH_STEPS = 80
#: Seconds between two looks at the store without a poke; the longest rest between rounds.
POLL_S = 5.0
#: The first retry of a failing tracker or run, doubled each failure up to the most.
BACKOFF_S, BACKOFF_MOST_S = 2.0, 300.0
#: A tracker (or run) still failing is said again after this long.
SAY_AGAIN_S = 1800.0
#: Seconds a stopping daemon's worker goes on sending, and past that the most it waits
#: for the request in flight (each is bounded by [trackers] timeout).
DRAIN_S, JOIN_GRACE_S = 30.0, 15.0
#: Runs looked at per tracker and round.
RUNS_PER_ROUND = 100
FAILED, BACK = "tracker_failed", "tracker_back"


@dataclass
class _Health:
    """A tracker's (or a run's there) failures in a row and when to try again."""

    failures: int = 0
    retry_at: float = 0.0
    since: float | None = None  # failing since
    said: float | None = None  # when the last event about it was stored

    def failed(self, now: float) -> bool:
        """Count a failure; whether to say so now (the first, then every SAY_AGAIN_S)."""
        self.failures += 1
        self.retry_at = now + min(BACKOFF_MOST_S, BACKOFF_S * 2 ** (self.failures - 1))
        if self.since is None:
            self.since = now
        say = self.said is None or now - self.said >= SAY_AGAIN_S
        if say:
            self.said = now
        return say


class TrackerWorker:
    """Sends every run to ``sinks`` (tensorboard.py, mlflow.py) on one thread.

    ``open_store()`` gives the worker its own connection; ``note(store, run_id) -> (name,
    text)`` writes a run's note for its end (the CLI's). ``sync`` is one round, what the
    thread repeats and the tests call.
    """

    def __init__(self, sinks, *, open_store, note=None, clock=time.time, duty: float = DUTY,
                 poll_s: float = POLL_S):
        self.sinks = list(sinks)
        self.open_store = open_store
        self.note = note
        self.clock = clock
        self.duty = duty
        self.poll_s = poll_s
        self._health = {sink.key: _Health() for sink in self.sinks}
        self._runs: dict[tuple[str, int], _Health] = {}
        self._since: dict[str, float] = {}
        self._last: dict[str, int] = {}  # per tracker, the run a round stopped after
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._drain_until = 0.0  # monotonic: when a stopping worker stops sending
        self._thread: threading.Thread | None = None

    # === the daemon's calls ===================================================

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._work, name="rngdctl-trackers",
                                            daemon=True)
            self._thread.start()

    def poke(self) -> None:
        """New steps may be stored: look now (the tick's whole cost: an event set)."""
        self._wake.set()

    def close(self, drain_s: float = DRAIN_S) -> None:
        """Send what is left for up to ``drain_s`` (a run that just ended: its end), then
        stop; what is still left goes when a daemon starts again, from the cursors."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._drain_until = time.monotonic() + drain_s
        self._stop.set()
        self._wake.set()
        thread.join(drain_s + JOIN_GRACE_S)
        if thread.is_alive():
            log.error("the trackers' worker is still in a request at daemon stop; left to it")

    # === one round ============================================================

    def sync(self, store, now: float | None = None) -> bool:
        """Send what each tracker lacks, a batch per pass of each run; whether more is left
        (a tracker backing off counts as nothing left: its time comes)."""
        more = False
        for sink in self.sinks:
            more = self._sync_sink(store, sink, self.clock() if now is None else now) or more
        return more

    def _sync_sink(self, store, sink, now: float) -> bool:
        health = self._health[sink.key]
        if now < health.retry_at:
            return False
        more, started = False, time.thread_time()
        try:
            since = self._since.get(sink.key)
            if since is None:
                since = self._since[sink.key] = store.tracker_since(sink.key, now)
            for run in self._in_turn(sink, store.tracker_due(sink.key, since,
                                                             limit=RUNS_PER_ROUND)):
                if time.thread_time() - started > ROUND_CPU_S:
                    return True  # the next round goes on from here
                self._last[sink.key] = run["id"]
                more = self._sync_run(store, sink, run, now) or more
        except Unreachable as exc:
            self._down(store, sink, health, exc, now)
            return False
        if health.since is not None:
            self._back(store, sink, health, now)
        return more

    def _in_turn(self, sink, runs: list[dict]) -> list[dict]:
        """The runs after the one the last round stopped after first, so that a long run
        catching up leaves the others their turn."""
        last = self._last.get(sink.key, 0)
        return [r for r in runs if r["id"] > last] + [r for r in runs if r["id"] <= last]

    def _sync_run(self, store, sink, run: dict, now: float) -> bool:
        key = (sink.key, run["id"])
        health = self._runs.get(key)
        if health is not None and now < health.retry_at:
            return False
        try:
            sent = send_run(store, sink, run, note=self.note, limit=BATCH_STEPS)
        except (Unreachable, KeyboardInterrupt):
            raise
        except Busy:
            return True  # the other writer is quick: next round
        except Exception as exc:  # this run's fault there: it backs off alone
            health = self._runs.setdefault(key, _Health())
            if health.failed(now):
                log.warning("%r: run %s not sent", sink, run["id"], exc_info=True)
                store.add_event(run["id"], FAILED, f"{_name(sink)}: run {run['id']} not sent: "
                                f"{_line(exc)}; tried again later", data={
                                    "tracker": sink.key, "error": _line(exc),
                                    "failures": health.failures}, now=now)
            return False
        if health is not None:
            del self._runs[key]
            store.add_event(run["id"], BACK, f"{_name(sink)}: run {run['id']} sent again",
                            data={"tracker": sink.key}, now=now)
        return sent.more

    def _down(self, store, sink, health: _Health, exc: Exception, now: float) -> None:
        first = health.since is None
        if not health.failed(now):
            return
        log.warning("%r unreachable: %s", sink, exc)
        words = ("unreachable" if first else
                 f"still unreachable since {time.strftime('%H:%M', time.localtime(health.since))}"
                 f" ({health.failures} tries)")
        store.add_event(None, FAILED, f"{_name(sink)}: {words}: {_line(exc)}; retried with a "
                        "backoff, every step kept: it catches up", data={
                            "tracker": sink.key, "error": _line(exc),
                            "failures": health.failures}, now=now)

    def _back(self, store, sink, health: _Health, now: float) -> None:
        down_s = now - health.since
        self._health[sink.key] = _Health()
        log.info("%r reachable again after %.0f s", sink, down_s)
        store.add_event(None, BACK, f"{_name(sink)}: reachable again after {down_s:.0f} s; "
                        "catching up", data={"tracker": sink.key, "down_s": down_s}, now=now)

    # === the thread ===========================================================

    def _work(self) -> None:
        try:
            store = self.open_store()
        except Exception:
            log.exception("the trackers' store connection: nothing is sent")
            return
        try:
            while not self._stop.is_set():
                self._wake.clear()
                used = time.thread_time()
                try:
                    more = self.sync(store)
                except Exception:  # a bug or a store fault: the next round tries again
                    log.exception("a round of the trackers failed")
                    more = False
                used = time.thread_time() - used
                if more:  # catching up: rest in proportion to the CPU this round took
                    self._stop.wait(min(self.poll_s, used * (1 - self.duty) / self.duty))
                else:
                    self._wake.wait(self.poll_s)
            self._drain(store)
        finally:
            store.close()

    def _drain(self, store) -> None:
        """The daemon stops: no rest between rounds, until nothing is left or time is up."""
        try:
            while time.monotonic() < self._drain_until and self.sync(store):
                pass
        except Exception:
            log.exception("the trackers' last round failed")


def _name(sink) -> str:
    return repr(sink)


def _line(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
