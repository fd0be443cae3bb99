"""The TUI's view model: plain data built from the store, with no Textual in it.

A refresh worker calls ``ViewSource.build()`` in a thread and hands the
resulting ``Snapshot`` to the app, which only copies numbers into widgets.
Steps are read incrementally (only those after the last one seen) and plot
series are downsampled (``rngdctl.tui.series``) to a fixed number of buckets
keeping each bucket's minimum and maximum, so a 100,000-step run costs about
what a 100-step one does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from daemon import holders as holders_mod
from daemon import liveness, stats, stepmodel
from daemon import replicas as replicas_mod
from daemon.errors import RngdctlError
from daemon.gates import NODES, node_verdicts
from daemon.series import SERIES_CHUNK
from daemon.store import ACTIVE, FINISHED, QUEUED, Store
from rngdctl.tui.notices import NOTIFY, Notice, notice_of
from rngdctl.tui.series import PLOT_BUCKETS, LossCurve, PassSeries, Series
from trainer import records

#: The host-load sparkline covers this many seconds.
LOAD_WINDOW_S = 3600.0
HISTORY_LIMIT = 50
EVENTS_LIMIT = 8
#: Seconds between two readings of the step model's comparison of a running run.
COMPARE_EVERY_S = 10.0
#: Daemon-level events shown in the TUI (`rngdctl events` has them all).
DAEMON_EVENTS = 3
#: Seconds between two estimates of the queue's starts and ends while the queue stays
#: the same (a change in the queue or the active run estimates again at once).
ESTIMATE_EVERY_S = 10.0


# === The view model ==========================================================


@dataclass(frozen=True)
class DaemonView:
    """``state``: alive; down (killed or hung: no heartbeat for three ticks, or its pid is
    gone); stopped; or never (no daemon ran here). See daemon/liveness.py."""

    state: str
    pid: int | None = None
    launcher: str | None = None
    node: str | None = None
    home: str | None = None
    heartbeat_age: float | None = None
    since: float | None = None  # alive: started; down: last heartbeat; stopped: when
    stop_reason: str | None = None
    pid_gone: bool = False


@dataclass(frozen=True)
class GateRow:
    name: str
    reading: str
    threshold: str
    verdict: str
    detail: str


@dataclass(frozen=True)
class GatesView:
    run_id: int | None = None
    run_label: str | None = None
    checked_at: float | None = None
    passed: bool | None = None
    rows: tuple[GateRow, ...] = ()
    blocked_for: float | None = None
    blocked_by: str | None = None
    load_now: float | None = None
    load_series: tuple[float, ...] = ()
    as_of: float | None = None  # no daemon runs: the stored verdicts are as of this time
    #: With node agents: the node the run would go to (the closest, when every node
    #: blocks) and each node's verdict, one line each.
    node: str | None = None
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class QueueRow:
    position: int
    run_id: int
    name: str | None
    held: bool
    cards: int | None
    resident: int | None
    steps: int | None
    model: str | None
    baseline: bool
    age: float
    #: Estimated start and end (epoch seconds; None: no estimate) and what they rest on,
    #: or why there is none (daemon/estimate.py).
    start: float | None = None
    end: float | None = None
    basis: str = ""


@dataclass(frozen=True)
class RunView:
    run_id: int
    name: str | None
    status: str
    config: dict
    label: str  # the pass shown: main, or baseline while the baseline runs
    step: int | None
    steps_total: int | None
    eta: float | None
    median_s: float | None
    tok_s: float | None
    model_s: float | None
    error: float | None
    last_loss: float | None
    #: The newest step's phases: (name, seconds, share of step_s, model's seconds or None).
    phases: tuple[tuple[str, float, float, float | None], ...]
    loss: Series
    step_time: Series
    events: tuple[tuple[float, str, str], ...]
    started: float | None
    ended: float | None
    exit_reason: str | None
    log_path: str | None
    #: The step model's error by term ("fwd_bwd -3.1 %, ...") and, when the compute
    #: term moved beyond the passes' spread, the sentence saying the host changed.
    error_terms: str | None = None
    host_notice: str | None = None


@dataclass(frozen=True)
class HistoryRow:
    run_id: int
    name: str | None
    status: str
    steps_done: int
    steps_total: int | None
    median_s: float | None
    tok_s: float | None
    model_s: float | None
    error: float | None
    ended: float | None
    model: str | None


@dataclass(frozen=True)
class HolderRow:
    pid: int | None  # None: a phantom pod (cards allocated, no process holds a file)
    user: str
    cmdline: str
    files: tuple[str, ...]
    age: float | None
    cards: tuple[str, ...] = ()
    pod: str | None = None
    job: str | None = None
    run: int | None = None
    mark: str = ""  # "orphan" | "phantom" | ""
    why: str | None = None  # the orphan's reason


@dataclass(frozen=True)
class EventRow:
    """A daemon-level event (no run): start, stop, tick failure, API outage, ..."""

    time: float
    kind: str
    message: str


@dataclass(frozen=True)
class Snapshot:
    now: float
    home: str
    daemon: DaemonView
    gates: GatesView
    queue: tuple[QueueRow, ...]
    current: RunView | None
    history: tuple[HistoryRow, ...]
    holders: tuple[HolderRow, ...]
    holders_time: float | None = None
    daemon_events: tuple[EventRow, ...] = ()
    #: What to ring the bell for: the `notify` events stored since the last refresh.
    notices: tuple[Notice, ...] = ()
    #: Under leader election: which replica leads, and the standbys (daemon/replicas.py).
    replicas: replicas_mod.Replicas = field(default_factory=replicas_mod.Replicas)


# === The step model, where it exists =========================================


@dataclass(frozen=True)
class Predicted:
    """The step model's prediction for a run's main pass."""

    step_s: float
    phases: dict  # phase -> predicted seconds


def predict_run(store: Store, run_id: int, last_main_step: dict) -> Predicted | None:
    """The step model's prediction for a run from its own baseline pass, or None.

    None when the run has no baseline pass, or the model cannot be fitted
    from it: the panels then show an en dash. Only the (short) baseline is read; the main pass's shape comes from
    its newest step, so a long run costs no more than a short one.
    """
    try:
        terms = stepmodel.terms_for_run(store, run_id)
        if terms is None:
            return None
        prediction = stepmodel.predict(terms, stepmodel.Shape.of_steps([last_main_step]))
    except (RngdctlError, ArithmeticError, KeyError, TypeError, ValueError):
        return None  # a baseline it cannot fit: no prediction, never a crash
    return Predicted(float(prediction.step_s), dict(prediction.phases))


def _top_terms(words: str, keep: int = 3) -> str:
    """The first ``keep`` terms of ``Comparison.error_terms`` (largest first): one panel line."""
    terms = words.split(", ")
    return ", ".join(terms[:keep]) + (", …" if len(terms) > keep else "")


@dataclass(frozen=True)
class _NoEstimate:
    basis: str
    start: None = None
    end: None = None


# === Building snapshots ======================================================


def _text(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def run_label(run: dict) -> str:
    return f"#{run['id']}" + (f" {run['name']}" if run.get("name") else "")


class ViewSource:
    """Builds snapshots from one store; keeps per-run caches between refreshes."""

    def __init__(self, store: Store, *, home: str | Path, run_ref: int | str | None = None,
                 clock: Callable[[], float] = time.time, tick: float = 5.0,
                 buckets: int = PLOT_BUCKETS):
        self.store = store
        self.home = str(home)
        self.run_ref = run_ref
        self.clock = clock
        self.tick = tick
        self.buckets = buckets
        self._series: dict[tuple[int, str], PassSeries] = {}
        self._finished: dict[int, HistoryRow] = {}
        self._predicted: dict[int, Predicted | None] = {}
        self._compared: dict[int, tuple[float, str, object]] = {}
        self._estimated: tuple[float, tuple, dict] | None = None
        self._event_cursor: int | None = None
        self._curves: dict[int, LossCurve] = {}

    # --- one refresh ----------------------------------------------------------

    def build(self) -> Snapshot:
        now = self.clock()
        queue = self.store.queue()
        holders, holders_time = self.holders(now)
        current = self.current(now)
        return Snapshot(
            now=now,
            home=self.home,
            daemon=(daemon := self.daemon(now)),
            gates=self.gates(now, queue, None if daemon.state == liveness.ALIVE else daemon.since),
            queue=self._queue_rows(queue, now, current),
            current=current,
            history=self.history(),
            holders=holders,
            holders_time=holders_time,
            daemon_events=self.daemon_events(),
            notices=self.notices(),
            replicas=replicas_mod.read(self.store, self.tick, now),
        )

    def notices(self) -> tuple[Notice, ...]:
        """The `notify` events stored since the last refresh. The first refresh only notes
        where the events end: what happened before the monitor opened is not news."""
        if self._event_cursor is None:
            self._event_cursor = self.store.last_event_id()
            return ()
        events = self.store.events_after(self._event_cursor, [NOTIFY])
        if events:
            self._event_cursor = events[-1]["id"]
        return tuple(n for n in map(notice_of, events) if n is not None)

    def daemon_events(self, limit: int = DAEMON_EVENTS) -> tuple[EventRow, ...]:
        return tuple(EventRow(e["time"], e["kind"], (e["message"] or "").splitlines()[0]
                              if e["message"] else "")
                     for e in self.store.daemon_events(limit))

    def daemon(self, now: float) -> DaemonView:
        live = liveness.read(self.store.daemon_state(), self.tick, now, home=self.home)
        return DaemonView(
            live.state, pid=live.pid, launcher=live.launcher, node=live.node,
            home=live.home or self.home,
            heartbeat_age=None if live.heartbeat is None else now - live.heartbeat,
            since=live.since, stop_reason=live.stop_reason, pid_gone=live.pid_gone)

    def gates(self, now: float, queue: list[dict], as_of: float | None = None) -> GatesView:
        """The head of the queue's latest stored check; ``as_of``: when no daemon runs, the
        time stored state was last kept current (durations stop at the last check)."""
        loads = self.store.load_series(since=now - LOAD_WINDOW_S)
        load_series = tuple(load for _, load in loads)
        load_now = load_series[-1] if load_series else None
        head = next((r for r in queue if not r["held"]), None)
        if head is None:
            return GatesView(load_now=load_now, load_series=load_series, as_of=as_of)
        checks = self.store.gate_checks(run_id=head["id"], limit=1)
        if not checks:
            return GatesView(run_id=head["id"], run_label=run_label(head), load_now=load_now,
                             load_series=load_series, as_of=as_of)
        check = checks[-1]
        placed = node_verdicts(check["gates"])
        rows = tuple(GateRow(g.get("name", "?"), _text(g.get("reading")),
                             _text(g.get("threshold")), g.get("verdict", "n/a"),
                             "each node's verdict below" if g.get("name") == NODES
                             else g.get("detail") or "")
                     for g in check["gates"])
        blocked_for = blocked_by = None
        if not check["passed"]:
            since = self.store.blocked_since(head["id"])
            until = now if as_of is None else check.get("last_time") or check["time"]
            blocked_for = None if since is None else max(0.0, until - since)
            blocked_by = "; ".join(r.detail or r.name for r in rows if r.verdict == "fail")
            if placed.get("node") and blocked_by:
                blocked_by = f"closest node {placed['node']}: {blocked_by}"
        return GatesView(run_id=head["id"], run_label=run_label(head),
                         checked_at=check.get("last_time") or check["time"],
                         passed=bool(check["passed"]), rows=rows,
                         blocked_for=blocked_for, blocked_by=blocked_by or None,
                         load_now=load_now, load_series=load_series, as_of=as_of,
                         node=placed.get("node"), nodes=tuple(placed.get("nodes") or ()))

    def _queue_rows(self, queue: list[dict], now: float,
                    current: RunView | None = None) -> tuple[QueueRow, ...]:
        # The current run's running median, when it is the active run's main pass, spares the
        # estimate a walk of its steps' index.
        medians = ({current.run_id: current.median_s} if current is not None
                   and current.status in ACTIVE and current.label == records.MAIN
                   and current.median_s is not None else {})
        estimates = self.estimates(queue, now, medians)
        return tuple(self._queue_row(r, now, estimates.get(r["id"])) for r in queue)

    @staticmethod
    def _queue_row(run: dict, now: float, estimate=None) -> QueueRow:
        c = run["config"] or {}
        return QueueRow(
            position=run["position"], run_id=run["id"], name=run.get("name"),
            held=bool(run["held"]), cards=_int(c.get("cards")),
            resident=_int(c.get("resident", c.get("resident_layers"))),
            steps=_int(c.get("steps")), model=c.get("model"), baseline=bool(c.get("baseline")),
            age=max(0.0, now - run["created"]),
            start=estimate.start if estimate else None, end=estimate.end if estimate else None,
            basis=estimate.basis if estimate else "no estimate",
        )

    def estimates(self, queue: list[dict], now: float, medians: dict | None = None) -> dict:
        """``daemon.estimate.queue_estimates`` by run id: again when the queue or the active run
        changed, else at most every ESTIMATE_EVERY_S (it fits the step model per queued run)."""
        if not queue:
            return {}
        key = (tuple((r["id"], r["held"], repr(r["config"])) for r in queue),
               tuple((r["id"], r["status"]) for r in self.store.active_runs()))
        cached = self._estimated
        if cached and cached[1] == key and now - cached[0] < ESTIMATE_EVERY_S:
            return cached[2]
        from daemon.estimate import queue_estimates

        try:
            value = {e.run_id: e for e in queue_estimates(self.store, now, medians=medians)}
        except (RngdctlError, ArithmeticError, KeyError, TypeError, ValueError) as exc:
            # Advice, never a crash: every row says why it has none.
            value = {r["id"]: _NoEstimate(f"no estimate: {exc}") for r in queue}
        self._estimated = (now, key, value)
        return value

    # --- runs -----------------------------------------------------------------

    def _pass_series(self, run_id: int, label: str) -> PassSeries:
        series = self._series.get((run_id, label))
        first = series is None
        if first:
            series = self._series[(run_id, label)] = self._first_read(run_id, label)
        # In chunks: a long run's first read stays small in memory.
        new = series.read(self.store, run_id, label)
        if series.stored_medians is not None and (new or first):
            if series.count != self.store.step_counts(run_id).get(label, 0):
                # A step stored out of order, before the newest the plots held: read
                # the pass whole, as a pass without stored plots.
                series = self._series[(run_id, label)] = PassSeries(self.buckets)
                series.read(self.store, run_id, label)
            else:  # the aggregates: a sealed row, or a running pass's markers
                series.stored_medians = stats.steady_medians(self.store, run_id, label)
        return series

    def _first_read(self, run_id: int, label: str) -> PassSeries:
        """The pass's stored plots: sealed when the run ended (``stats.seal``), else kept at
        ingest (``series.keep_plots``); one row for a run of any length. Empty plots where
        neither is stored."""
        series = PassSeries(self.buckets)
        sealed = self.store.sealed_aggregates(run_id).get(f"plots:{label}")
        kept = self.store.pass_state(run_id, label, "plots") if sealed is None else None
        plots = sealed if sealed is not None else kept[1] if kept is not None else None
        try:
            if plots is not None and plots["loss"]["limit"] == self.buckets:
                series.restore(plots)
        except (KeyError, TypeError, ValueError):  # stored by an older rngdctl: read the steps
            series = PassSeries(self.buckets)
        return series

    def _current_run(self) -> dict | None:
        if self.run_ref is not None:
            return self.store.run(self.run_ref)
        active = self.store.active_runs()
        if active:
            return active[0]
        for run in self.store.runs(FINISHED, limit=1):
            return run
        return None

    def current(self, now: float) -> RunView | None:
        run = self._current_run()
        return None if run is None else self.run_view(run, now)

    def _prediction(self, run: dict, last_main_step: dict | None) -> Predicted | None:
        # One after the other, the baseline pass ends before the main pass
        # begins, so once the main pass has a step the prediction is final: fit
        # it once per run. Interleaved, the baseline grows beside the main pass
        # until the run ends: fit it again on each refresh (it is short).
        if run["id"] in self._predicted:
            return self._predicted[run["id"]]
        if last_main_step is None:
            return None
        value = predict_run(self.store, run["id"], last_main_step)
        if not ((run.get("config") or {}).get("interleave") and run["status"] in ACTIVE):
            self._predicted[run["id"]] = value
        return value

    def _comparison(self, run: dict, now: float):
        """``stepmodel.for_run`` of the run: once when it has ended, every COMPARE_EVERY_S while
        it runs (it reads the whole main pass)."""
        cached = self._compared.get(run["id"])
        if cached and (cached[1] == run["status"] and (run["status"] not in ACTIVE
                                                       or now - cached[0] < COMPARE_EVERY_S)):
            return cached[2]
        try:
            value = stepmodel.for_run(self.store, run["id"])
        except (RngdctlError, ArithmeticError, KeyError, TypeError, ValueError):
            value = None  # a baseline it cannot fit: no split, never a crash
        self._compared[run["id"]] = (now, run["status"], value)
        return value

    def run_view(self, run: dict, now: float) -> RunView:
        config = run["config"] or {}
        main = self._pass_series(run["id"], records.MAIN)
        label, series = records.MAIN, main
        if not main.count and config.get("baseline"):
            baseline = self._pass_series(run["id"], records.BASELINE)
            if baseline.count:
                label, series = records.BASELINE, baseline
        median_s, tok_s = series.medians()
        if label == records.BASELINE:
            steps_total = _int(config.get("baseline_steps"))
        else:
            steps_total = _int(config.get("steps"))
        step = series.last or None
        eta = None
        if run["status"] in ACTIVE and steps_total and median_s is not None:
            eta = max(0, steps_total - (step or 0)) * median_s
        last = self.store.last_step(run["id"], label) if step is not None else None
        predicted = self._prediction(run, last) if label == records.MAIN else None
        model_s = predicted.step_s if predicted else None
        phases: tuple = ()
        if last:
            step_s = last.get("step_s") or 0.0
            model_phases = predicted.phases if predicted else {}
            measured = last.get("phases") or {}
            order = [p for p in records.PHASES if p in measured]
            order += sorted(set(measured) - set(order))
            phases = tuple((name, float(measured[name]),
                            float(measured[name]) / step_s if step_s else 0.0,
                            model_phases.get(name))
                           for name in order)
        events = tuple((e["time"], e["kind"], e["message"])
                       for e in self.store.events(run_id=run["id"], limit=EVENTS_LIMIT))
        error = stepmodel.relative_error(model_s, median_s)
        compared = self._comparison(run, now) if predicted is not None else None
        if compared is not None:
            # What `show` and the note say: the model against its own window.
            error = compared.error
        return RunView(
            run_id=run["id"], name=run.get("name"), status=run["status"], config=config,
            label=label, step=step, steps_total=steps_total, eta=eta, median_s=median_s,
            tok_s=tok_s, model_s=model_s, error=error,
            last_loss=series.last_loss, phases=phases,
            loss=series.loss_plot.series(), step_time=series.time_plot.series(),
            events=events, started=run.get("started"), ended=run.get("ended"),
            exit_reason=run.get("exit_reason"), log_path=run.get("log_path"),
            error_terms=_top_terms(compared.error_terms()) if compared else None,
            host_notice=(compared.short_notice() or compared.short_busy_notice())
            if compared else None,
        )

    def history(self) -> tuple[HistoryRow, ...]:
        rows = []
        for run in self.store.runs(FINISHED, limit=HISTORY_LIMIT):
            # A finished run does not change: it is read once.
            cached = self._finished.get(run["id"])
            if cached is None:
                cached = self._finished[run["id"]] = self._history_row(run)
            rows.append(cached)
        return tuple(rows)

    def _history_row(self, run: dict) -> HistoryRow:
        # From the pass's aggregates: a finished run of 1,000,000 steps costs
        # a few index walks, not a read of its steps.
        config = run["config"] or {}
        steps_done = self.store.step_counts(run["id"]).get(records.MAIN, 0)
        median_s, tok_s = stats.steady_medians(self.store, run["id"], records.MAIN)
        last = self.store.last_step(run["id"], records.MAIN) if steps_done else None
        predicted = self._prediction(run, last)
        model_s = predicted.step_s if predicted else None
        return HistoryRow(
            run_id=run["id"], name=run.get("name"), status=run["status"],
            steps_done=steps_done, steps_total=_int(config.get("steps")),
            median_s=median_s, tok_s=tok_s, model_s=model_s,
            error=stepmodel.relative_error(model_s, median_s), ended=run.get("ended"),
            model=config.get("model"),
        )

    # --- the history's overlay -------------------------------------------------

    def loss_curves(self, run_ids: tuple[int, ...]) -> tuple[LossCurve, ...]:
        """The runs' loss curves, read in chunks; kept only for the runs asked last (a finished
        run's curve does not change, so smoothing it again reads nothing)."""
        curves = tuple(self._curves.get(r) or self._loss_curve(r) for r in run_ids)
        self._curves = {c.run_id: c for c in curves
                        if (self.store.run(c.run_id) or {}).get("status") in FINISHED}
        return curves

    def _loss_curve(self, run_id: int) -> LossCurve:
        steps: list[int] = []
        losses: list[float] = []
        after = 0
        while True:
            rows = self.store.step_series(run_id, records.MAIN, after_step=after,
                                          limit=SERIES_CHUNK)
            for step, loss, _step_s, _tokens, _t in rows:
                if loss is not None and math.isfinite(loss):
                    steps.append(step)
                    losses.append(loss)
            if len(rows) < SERIES_CHUNK:
                return LossCurve(run_id, run_label(self.store.run(run_id)), tuple(steps),
                                 tuple(losses))
            after = rows[-1][0]

    # --- device holders -------------------------------------------------------

    def holders(self, now: float) -> tuple[tuple[HolderRow, ...], float | None]:
        """Device holders in the newest host sample, and that sample's time."""
        sample = self.store.latest_sample()
        if sample is None:
            return (), None
        rows = []
        for h in sample.get("holders") or []:
            row = holders_mod.HolderRow.from_dict(h)
            rows.append(HolderRow(
                pid=row.pid, user=row.user, cmdline=row.command, files=row.files,
                age=row.age(now), cards=row.cards, pod=row.pod, job=row.job, run=row.run,
                mark=row.mark, why=row.orphan,
            ))
        return tuple(rows), sample["time"]


# === Small formatting shared by widgets and --snapshot =======================


def ago(seconds: float | None) -> str:
    """A short age: 45 s, 14 m, 3 h 05 m, 2 d 4 h; an en dash when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} m"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} m"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def num(value: float | None, spec: str = ".3g", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:{spec}}{unit}"


def percent(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value * 100:+.1f} %"


def clock_time(t: float | None) -> str:
    if t is None:
        return "–"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


#: Run states by glyph and word, so that neither colour nor glyph alone carries them.
STATUS_GLYPHS = {
    QUEUED: "◷", "launching": "↑", "running": "▶", "done": "✓", "failed": "✗", "oom": "✗",
    "timeout": "⌛", "cancelled": "⊘",
}
VERDICT_GLYPHS = {"pass": "✓", "fail": "✗", "n/a": "–"}
DAEMON_GLYPHS = {"alive": "●", "down": "✗", "stopped": "○", "never": "○"}


def status_text(status: str, held: bool = False) -> str:
    if held:
        return "⏸ held"
    return f"{STATUS_GLYPHS.get(status, '?')} {status}"
