"""The daemon loop: probes, gates, launch, follow, ingest; one run at a time, or with
node agents up to ``runs_per_node`` runs per node, nodes in parallel (``_schedule``).

``Daemon.tick(now)`` is one iteration and is what tests drive; ``run()`` only
loops over it until a signal sets the stop flag. A failing tick is logged and
stored as an event; it never ends the loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import gc
import logging
import os
import signal
import sqlite3
import threading
import time
from dataclasses import dataclass

from daemon import faults
from daemon.errors import DaemonAlreadyRunning, LaunchError
from daemon.gates import rules
from daemon.home import Config, Home
from daemon.launchers.base import REQUEUE, Launcher, Outcome
from daemon.probes import holders as holders_mod
from daemon.probes.card_sampler import CardSampler
from daemon.probes.host_reading import HostReading, read_host
from daemon.scheduling.estimate import EstimateRecorder
from daemon.scheduling.notify import Notifications
from daemon.stepmodel import stats
from daemon.store import FAILED, FINISHED, Store
from daemon.store.compaction import Compactor

log = logging.getLogger("rngdctl.daemon")

#: Finished runs without sealed aggregates that a starting daemon seals, newest first.
SEAL_AT_START = 50


class DaemonLock:
    """One daemon per home: an exclusive flock on ``daemon.lock``, holding our pid."""

    def __init__(self, home: Home):
        self.path = home.lock_path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DaemonAlreadyRunning(
                f"another daemon (pid {other}) is already running on {self.path.parent}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class TickResult:
    """What one tick did, for tests and the log."""

    launched: int | None = None
    finished: tuple[int, str] | None = None
    gates_passed: bool | None = None
    idle: bool = False
    standby: bool = False  # leader election: another replica holds the Lease


class Daemon:
    def __init__(self, home: Home, store: Store, config: Config, launcher: Launcher, *,
                 exit_when_idle: bool = False, probe=None, clock=time.time,
                 proc: str = "/proc", leader=None, write_note=None, card_reader=None,
                 tracker_note=None):
        self.home = home
        self.store = store
        self.config = config
        self.launcher = launcher
        self.exit_when_idle = exit_when_idle
        self.probe = probe or (lambda: read_host(tuple(config.gates.device_globs)))
        self.clock = clock
        self.proc = proc  # where holders' cgroup files are read (pod of each holder)
        self.stop_reason: str | None = None
        self._stop = threading.Event()
        self._lock = DaemonLock(home)
        self._passes_in_row = 0
        self._head_id: tuple[int, str | None] | None = None  # (run, node) passes count for
        self._cancelling: set[int] = set()
        self.compactor = Compactor(store, full_resolution_days=config.daemon.full_resolution_days,
                                   every=config.daemon.compact_every)
        self._follow_failures: dict[int, int] = {}
        #: Ends the store refused (a full disk): (run, outcome with its time) by run, stored
        #: at a later tick, or judged again by the next daemon from what the run left.
        self._unstored: dict[int, tuple[dict, Outcome]] = {}
        self.cards = CardSampler(store, every=config.daemon.card_sample_s, reader=card_reader)
        self._to_seal: list[int] = []  # finished runs left unsealed, sealed one per tick
        self._estimates = EstimateRecorder()
        #: ``daemon.launchers.k8s.leader.LeaderElector`` when replicas take turns; None: the
        #: only one.
        self.leader = leader
        self._active = False  # this process leads: holds the home's lock, owns the daemon row

        # write_note(store, run_id, folder) -> path: the CLI's, so the daemon imports no note code.
        self.notifications = Notifications(store, config.notify, open_store=lambda: Store(
            store.path), run_dir=home.run_dir, write_note=write_note, clock=clock)
        # [trackers] (daemon/trackers/): sent from the store on their own thread, which the
        # tick only pokes; tracker_note(store, run_id) -> (name, text) is the CLI's note.
        self.trackers = _trackers(config, store, tracker_note, clock)
    # === leader election (daemon/launchers/k8s/leader.py) ==============================

    def _lead(self, now: float) -> bool:
        """Whether this replica acts this tick; takes over as the Lease allows."""
        leader = self.leader
        leading = leader.lead()
        if leading and not self._active:
            try:
                self._activate(now)
            except DaemonAlreadyRunning as exc:  # the old leader still runs on this home
                leader.note = str(exc)
                leading = False
            else:
                self.store.add_event(None, "leader", f"{leader.identity} leads ({leader.where})",
                                     now=now)
        elif not leading and self._active:
            # We led and lost the Lease: stop; the restarted pod comes back as a standby.
            self._active = False
            self._lock.release()
            self.store.add_event(None, "leader", f"{leader.identity} lost the {leader.where}: "
                                 f"{leader.note}; it stops launching", now=now)
            self.stop(f"lost the {leader.where}: {leader.note}")
        self.store.set_replica(leader.identity, role="leader" if leading else "standby",
                               leader=leader.holder, pid=os.getpid(), now=now)
        if not leading:
            log.info("standby: %s", leader.note)
        return leading

    def _fenced(self, run_id: int, now: float) -> bool:
        """Only the Lease's holder launches: one guarded write right before it."""
        if self.leader is None or self.leader.fence():
            return True
        self.store.add_event(run_id, "leader", f"not launched: {self.leader.note}", now=now)
        return False

    # === lifecycle ===========================================================

    def start(self) -> None:
        """Take the lock, announce ourselves, adopt what a previous daemon left running.

        Under leader election this happens in the tick that takes the Lease.
        """
        if self.leader is None:
            self._activate(self.clock())

    def _activate(self, now: float) -> None:
        self._lock.acquire()
        self._active = True
        self.store.daemon_started(pid=os.getpid(), launcher=self.launcher.name,
                                  home=str(self.home.path), now=now)
        self.store.add_event(None, "daemon", f"daemon started (pid {os.getpid()}, launcher "
                             f"{self.launcher.name})", now=now)
        self.launcher.startup()
        for run in self.store.active_runs():
            try:
                outcome = self.launcher.recover(run)
            except Exception as exc:  # the run stays active: follow() retries, K times
                log.exception("recovering run %s failed", run["id"])
                self.store.add_event(run["id"], "follow_failed",
                                     f"recovering the run after a restart failed: {exc!r}",
                                     now=self.clock())
                continue
            if outcome is not None:
                self._record(run, outcome)
        # Finished runs a store from before version 9 left unsealed: one per tick, so a
        # long backlog never delays the first tick's heartbeat.
        self._to_seal = self.store.unsealed_runs(SEAL_AT_START)
        if self.trackers is not None:
            self.trackers.start()
            log.info("sending every run to %s", ", ".join(map(repr, self.trackers.sinks)))
        self._freeze_heap()
        log.info("%s", start_line(self.home, self.config, self.launcher))

    @staticmethod
    def _freeze_heap() -> None:
        """Put what start-up built (the Kubernetes client's modules and models, the store, the
        launcher) out of the cyclic collector's reach: it lives as long as the daemon, and a
        full collection walking it again fell in a tick now and then (issue 13: 55-80 ms at
        50 nodes, the tick CPU's whole p95 tail). The collection first, so no garbage is
        frozen with it."""
        gc.collect()
        gc.freeze()

    def _seal(self, run_id: int) -> None:
        """Store a finished run's aggregates, so reading it later costs one row (issue 12).

        Seconds for a run of millions of steps: the heartbeat is written again after it.
        """
        try:
            stats.seal(self.store, run_id)
        except Exception:  # readers compute the numbers without it: never fail the daemon
            log.exception("sealing run %s's aggregates failed", run_id)
        self.store.daemon_heartbeat(now=self.clock())

    def stop(self, reason: str) -> None:
        """Ask the loop to stop after the current tick (safe from a signal handler)."""
        self.stop_reason = self.stop_reason or reason
        self._stop.set()

    def close(self) -> None:
        reason = self.stop_reason or "stopped"
        was_active, self._active = self._active, False
        left = self._left_behind() if was_active or self.leader is None else ""
        try:
            self._store_held_ends()
            for run, outcome in self._unstored.values():
                log.error("run %s's end (%s) is not stored: the next daemon judges the run "
                          "again from what it left (its log, its Job)", run["id"],
                          outcome.status)
            self.notifications.close()  # the calls queued so far, each bounded
            if self.trackers is not None:
                self.trackers.close()  # what is left, for at most 30 s: the rest at next start
            if was_active or self.leader is None:  # a standby never owned the daemon row
                self.store.daemon_stopped(reason, now=self.clock())
                self.store.add_event(None, "daemon", f"daemon stopped: {reason}",
                                     now=self.clock())
            else:
                self.store.add_event(None, "leader", f"standby {self.leader.identity} stopped: "
                                     f"{reason}", now=self.clock())
        finally:
            self._lock.release()
            gc.unfreeze()  # what start-up froze is the collector's again (tests start many)
            try:
                if self.leader is not None:
                    if was_active:  # lock first, then the Lease: the standby takes both next tick
                        self.leader.release()
                    self.store.drop_replica(self.leader.identity)
            finally:
                self.launcher.close()
        log.info("daemon stopped: %s%s", reason, left)

    def _left_behind(self) -> str:
        """What goes on without this daemon, for its last line (docs/design.md: a trainer
        outlives the daemon, to be adopted by the next one)."""
        try:
            active = self.store.active_runs()
        except sqlite3.Error:
            return ""
        if not active:
            return ""
        ids = ", ".join(str(r["id"]) for r in active)
        return (f"; run{'s' if len(active) > 1 else ''} {ids} left running, for the next "
                f"daemon on this home to adopt")

    def run(self) -> None:
        self.start()
        try:
            while not self._stop.is_set():
                try:
                    result = self.tick()
                except Exception as exc:  # one bad tick must not end the daemon
                    log.exception("tick failed")
                    self._note_failure(exc)
                    result = TickResult()
                if result.idle and self.exit_when_idle:
                    self.stop("idle: the queue is empty and nothing runs")
                    break
                self._stop.wait(self.config.daemon.tick)
        finally:
            self.close()

    def _note_failure(self, exc: Exception) -> None:
        try:
            self.store.add_event(None, "error", f"tick failed: {exc!r}")
        except sqlite3.Error:
            log.error("cannot store the failure either: the store is failing")

    # === one tick ============================================================

    def tick(self, now: float | None = None) -> TickResult:
        now = self.clock() if now is None else now
        if self.leader is None:
            return self._tick(now)
        if not self._lead(now):
            return TickResult(standby=True)
        try:
            return self._tick(now)
        finally:
            self.leader.renew()  # unless this tick's fence already wrote the Lease

    def _tick(self, now: float) -> TickResult:
        result = TickResult()
        self.store.daemon_heartbeat(now=now)

        # 1. Sample the host, whether or not a run is active.
        host = self.probe()
        held = self._holders(host, now)
        active = self.store.active_runs()
        self.store.add_sample(load=host.load, holders=[r.as_dict() for r in held.rows],
                              run_id=active[0]["id"] if active else None, now=now)
        self.compactor.maybe_run(now)  # a comparison, except once an hour

        # 2. Follow what runs; it may finish now. The launcher may look at every run at
        # once (k8s: list calls whatever their number), for the follows and the gate check.
        # An end the store refused before goes in first; its run is not followed again.
        self._store_held_ends()
        with self._look(active):
            for run in active:
                if run["id"] in self._unstored:
                    continue
                outcome = self._follow_guarded(run, now)
                if outcome is not None:
                    self._record(run, outcome, now=now)
                    result.finished = (run["id"], outcome.status)
            self._record_estimates(now)
            if self._to_seal:
                self._seal(self._to_seal.pop(0))
            self._sample_cards(now, held.rows, active, agents=False)
            self._schedule(host, held.rows, now, result)
            self._sample_cards(now, held.rows, active, agents=True)
        if self.trackers is not None:
            self.trackers.poke()  # the trackers' thread sends what ingest stored
        return result

    def _sample_cards(self, now: float, rows, active: list[dict], *, agents: bool) -> None:
        """The cards' readings every card_sample_s (daemon/probes/card_sampler.py): this
        host's before the gate check, which reads them; with node agents the agents', after
        it (the gate check's list of them serves, when it made one)."""
        if not self.cards.due(now) or agents != getattr(self.launcher, "uses_agents", False):
            return
        try:
            if agents:
                self.cards.sample_agents(now, self.launcher.agent_readings(), active)
            else:
                self.cards.sample(now, rows, active, self.launcher.own_pids())
        except Exception:  # a card reading is advice: it must never cost the tick
            log.exception("reading the cards failed")

    def _look(self, active: list[dict]):
        """The launcher's look at the runs it follows, for one tick (``look``: optional)."""
        look = getattr(self.launcher, "look", None)
        return look(active) if look is not None else contextlib.nullcontext()

    def _schedule(self, host: HostReading, rows, now: float, result: TickResult) -> None:
        """Gate the head of the queue and launch it where there is room: at most one launch.

        ``launcher.runs_per_node`` None (the local launcher, Kubernetes without
        agents): one run at a time, and nothing is gated while one is active.
        N: up to N of our runs per node, nodes in parallel; the cluster reading
        names the node the head would go to, and the store's claim for that
        node is what finally enforces the limit (``Store.claim_for_launch``).
        Queue order is strict: the run behind the head waits for the head.
        """
        per_node = getattr(self.launcher, "runs_per_node", None)
        active = self.store.active_runs()
        if active and per_node is None:
            return
        # Runs whose --after run failed or was cancelled can never start: cancel them
        # first, saying why.
        for run_id, reason in self.store.cancel_broken_dependents(now=now):
            log.info("run %s cancelled: %s", run_id, reason)
            self._notify("ended", self.store.run(run_id), "cancelled", reason, now)
        head = self.store.head_of_queue()
        if head is None:
            self._passes_in_row = 0
            result.idle = not active
            return
        passed, node = self._gate(head, host, rows, now)
        result.gates_passed = passed
        if not passed:
            self._ended_at_the_gate(head, now)
        if not passed or not self._fenced(head["id"], now):
            return
        if self.store.claim_for_launch(head["id"], launcher=self.launcher.name, node=node,
                                       per_node=per_node or 1, now=now):
            faults.point("after_claim")
            self._passes_in_row = 0
            run = self.store.run(head["id"])
            try:
                self.launcher.launch(run)
                result.launched = run["id"]
                log.info("%s", launched_line(self.store.run(run["id"])))
                self._notify("started", self.store.run(run["id"]), now)
            except LaunchError as exc:
                self.store.add_event(run["id"], "launch_failed", str(exc), now=now)
                self._record(run, Outcome("failed", str(exc)), now=now)

    def _record_estimates(self, now: float) -> None:
        """Store the first start/end estimate of each queued run (its error is kept at its end)."""
        try:
            self._estimates.record(self.store, now)
        except Exception:  # an estimate is advice: it must never keep a run from launching
            log.exception("estimating the queue failed")

    def _follow(self, run: dict) -> Outcome | None:
        if run.get("cancel_requested") and run["id"] not in self._cancelling:
            self._cancelling.add(run["id"])
            self.launcher.cancel(run)
        return self.launcher.follow(run)

    def _follow_guarded(self, run: dict, now: float) -> Outcome | None:
        """Follow one run; K failures in a row fail it, so it cannot hold the queue."""
        run_id, limit = run["id"], max(1, self.config.daemon.follow_failures)
        try:
            outcome = self._follow(run)
        except Exception as exc:
            failures = self._follow_failures.get(run_id, 0) + 1
            self._follow_failures[run_id] = failures
            log.exception("following run %s failed (%d of %d)", run_id, failures, limit)
            self.store.add_event(run_id, "follow_failed", f"following the run failed "
                                 f"({failures} of {limit} in a row): {exc!r}", now=now)
            if failures < limit:
                return None
            # The trainer must not outlive the run: the next one would share its cards.
            self.launcher.abandon(run)
            return Outcome(FAILED, f"following the run failed {limit} ticks in a row; the "
                                   f"last error: {exc!r}")
        self._follow_failures.pop(run_id, None)
        return outcome


    def _holders(self, host: HostReading, now: float) -> holders_mod.Correlation:
        """Each holder with its pod, Job and run; phantom pods (one pod list call in k8s)."""
        if not hasattr(self.launcher, "node_pods"):  # a launcher without pods (test doubles)
            return holders_mod.correlate(host, node=None, pods=None, uids={}, idle_since={},
                                         now=now)
        return holders_mod.report(host, self.launcher, self.store, now=now, proc=self.proc,
                                  phantom_after=self.config.gates.phantom_after)

    def _gate(self, head: dict, host: HostReading, rows, now: float) -> tuple[bool, str | None]:
        """(may the head launch now, the node it goes to: None without node agents).

        The head must pass on ``consecutive`` ticks in a row, on the same node.
        """
        cluster = self.launcher.cluster_reading(head)
        if (head["id"], cluster.node) != self._head_id:
            self._head_id, self._passes_in_row = (head["id"], cluster.node), 0
        gates = rules.evaluate(host=host, cluster=cluster, cards=int(head["config"]["cards"]),
                               active=self.store.active_runs(),
                               load_max=self.config.gates.load_max,
                               own_pids=self.launcher.own_pids(), holders=rows,
                               card_reading=self.cards.current(now),
                               max_temp_c=self.config.gates.max_temp_c)
        passed = rules.all_pass(gates)
        self._passes_in_row = self._passes_in_row + 1 if passed else 0
        blocked_since = self.store.blocked_since(head["id"]) if passed else None
        self.store.add_gate_check(head["id"], [g.as_dict() for g in gates], passed, now=now)
        self._notify("gates_checked", head, passed=passed, blocked_since=blocked_since, now=now)
        return passed and self._passes_in_row >= max(1, self.config.gates.consecutive), \
            cluster.node

    def _record(self, run: dict, outcome: Outcome, now: float | None = None) -> None:
        self._cancelling.discard(run["id"])
        self._follow_failures.pop(run["id"], None)
        if outcome.status == REQUEUE:
            log.info("run %s requeued: %s", run["id"], outcome.reason or "requeued")
            self.store.requeue(run["id"])
            self.store.add_event(run["id"], "requeue", outcome.reason or "requeued", now=now)
            if outcome.retry is not None:  # an automatic retry (daemon/launchers/retry.py)
                self.store.add_event(run["id"], "retry", outcome.retry["message"],
                                     data=outcome.retry["data"], now=now)
            return
        assert outcome.status in FINISHED, outcome
        now = outcome.ended if outcome.ended is not None else now  # when it ended, not later
        try:
            self.store.finish_run(run["id"], outcome.status, reason=outcome.reason,
                                  exit_code=outcome.exit_code, now=now)
        except sqlite3.OperationalError as exc:  # a full disk: keep the end, and its reason
            self._hold_end(run, outcome, now, exc)
            return
        self._unstored.pop(run["id"], None)
        self._seal(run["id"])
        first_line = (outcome.reason or "").splitlines()[0] if outcome.reason else ""
        self.store.add_event(run["id"], "finished",
                             outcome.status + (f": {first_line}" if first_line else ""), now=now)
        log.info("%s", ended_line(self.store.run(run["id"])))
        self._notify("ended", run, outcome.status, outcome.reason, now)

    def _hold_end(self, run: dict, outcome: Outcome, now: float | None, exc) -> None:
        """Keep a run's end in memory while the store refuses it; said once in the log."""
        if run["id"] not in self._unstored:
            log.error("run %s ended %s, but the store refused its end (%s): kept until the "
                      "store takes it", run["id"], outcome.status, exc)
        ended = now if now is not None else self.clock()
        self._unstored[run["id"]] = (run, dataclasses.replace(outcome, ended=ended))

    def _store_held_ends(self) -> None:
        """Store the ends the store refused before (each is held again if it still refuses)."""
        for run, outcome in list(self._unstored.values()):
            self._record(run, outcome)

    def _ended_at_the_gate(self, head: dict, now: float) -> None:
        """A launcher may fail a queued run while gating it (k8s: a pre-pull not retried)."""
        run = self.store.run(head["id"])
        if run["status"] in FINISHED:
            self._notify("ended", run, run["status"], run.get("exit_reason"), now)

    def _notify(self, moment: str, *args, **kwargs) -> None:
        """Tell the notifications a moment (daemon/scheduling/notify.py); never fails the tick."""
        try:
            getattr(self.notifications, moment)(*args, **kwargs)
        except Exception:  # a notice is advice: it must never stop a launch or a record
            log.exception("notification %s failed", moment)


def _trackers(config: Config, store: Store, note, clock):
    """The worker sending every run to ``[trackers]``; None when none is set (nothing of
    daemon/trackers/ is loaded then)."""
    if config.trackers.tensorboard is None and config.trackers.mlflow is None:
        return None
    from daemon.trackers.targets import configured
    from daemon.trackers.worker import TrackerWorker

    return TrackerWorker(configured(config), open_store=lambda: Store(store.path), note=note,
                         clock=clock)


# === what the daemon says on stderr: at start, at each launch and end, at stop =====


def start_line(home: Home, config: Config, launcher: Launcher) -> str:
    """The daemon's first line: where, which launcher, and what its gates read."""
    gates = config.gates
    read = [f"host load < {gates.load_max:g}",
            f"no process holding {', '.join(gates.device_globs)}",
            f"cards alive and <= {gates.max_temp_c:g} °C (furiosa-smi)"]
    if launcher.name == "k8s":
        read.append("cards free and the image present on the node")
    read.append("one run at a time" if getattr(launcher, "runs_per_node", None) is None
                else f"{launcher.runs_per_node} run(s) per node")
    ticks = max(1, gates.consecutive)
    return (f"daemon started on {home.path} (pid {os.getpid()}): launcher {launcher.name}, "
            f"a tick every {config.daemon.tick:g} s; gates: {', '.join(read)}; "
            f"{ticks} passing tick{'s' if ticks > 1 else ''} in a row before a launch")


def _run_name(run: dict) -> str:
    return f"run {run['id']}" + (f" ({run['name']})" if run.get("name") else "")


def launched_line(run: dict) -> str:
    where = (f"Job {run['job_name']}" if run.get("job_name")
             else f"pid {run['pid']}" if run.get("pid") else "its trainer starting")
    node = f" on node {run['node']}" if run.get("node") else ""
    return (f"{_run_name(run)} launched: {where}{node}, {run['config'].get('steps')} steps "
            f"(attempt {run.get('attempts') or 1})")


def ended_line(run: dict) -> str:
    took = ""
    if run.get("started") and run.get("ended"):
        took = f" after {run['ended'] - run['started']:.0f} s"
    reason = (run.get("exit_reason") or "").splitlines()
    return f"{_run_name(run)} {run['status']}{took}" + (f": {reason[0]}" if reason else "")


def install_signal_handlers(daemon: Daemon) -> None:
    # Handlers only set a flag: the loop notices it between ticks.
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *_: daemon.stop("SIGINT"))
