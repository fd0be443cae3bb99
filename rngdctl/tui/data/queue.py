"""The queue: the head's gate check and each queued run's row with its estimated start and end."""

from __future__ import annotations

from daemon.errors import RngdctlError
from daemon.gates.rules import NODES, node_verdicts
from daemon.store import ACTIVE
from rngdctl.tui.data.reader import Reader
from rngdctl.tui.data.text import _int, _text, run_label
from rngdctl.tui.data.views import GateRow, GatesView, QueueRow, RunView
from trainer import records

#: The host-load sparkline covers this many seconds.
LOAD_WINDOW_S = 3600.0
#: Seconds between two estimates of the queue's starts and ends while the queue stays
#: the same (a change in the queue or the active run estimates again at once).
ESTIMATE_EVERY_S = 10.0


class QueueViews(Reader):
    """The gates panel and the queue panel."""

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

    def queue(self) -> list[dict]:
        """The queued runs in launch order (``Store.queue``), the same list while the queue as
        stored is unchanged: decoding a sweep of 10,000 queued runs every second cost each
        refresh 100 ms (issue 33), a look at them as stored a tenth of it."""
        stored = self.store.queue_as_stored()
        if self._queue is None or self._queue[0] != stored:
            self._queue = (stored, self.store.queue())
        return self._queue[1]

    def _queue_rows(self, queue: list[dict], now: float,
                    current: RunView | None = None) -> tuple[QueueRow, ...]:
        # The current run's running median, when it is the active run's main pass, spares the
        # estimate a walk of its steps' index.
        medians = ({current.run_id: current.median_s} if current is not None
                   and current.status in ACTIVE and current.label == records.MAIN
                   and current.median_s is not None else {})
        estimates = self.estimates(queue, now, medians)
        kept = self._queue_shown
        if kept is not None and kept[0] is queue and kept[1] is estimates:
            return kept[2]  # the same queue and estimates: the same rows
        rows = tuple(self._queue_row(r, estimates.get(r["id"])) for r in queue)
        self._queue_shown = (queue, estimates, rows)
        return rows

    @staticmethod
    def _queue_row(run: dict, estimate: tuple | None) -> QueueRow:
        c = run["config"] or {}
        start, end, basis = estimate or (None, None, "no estimate")
        return QueueRow(
            position=run["position"], run_id=run["id"], name=run.get("name"),
            held=bool(run["held"]), cards=_int(c.get("cards")),
            resident=_int(c.get("resident", c.get("resident_layers"))),
            steps=_int(c.get("steps")), model=c.get("model"), baseline=bool(c.get("baseline")),
            created=run["created"],
            start=start, end=end, basis=basis,
        )

    def estimates(self, queue: list[dict], now: float, medians: dict | None = None) -> dict:
        """``daemon.scheduling.estimate.queue_estimates`` by run id, (start, end, basis) each:
        again when the queue (``queue``: a list ``queue()`` gave) or the active run changed,
        else at most every ESTIMATE_EVERY_S (it walks the whole queue). Plain tuples, not the
        estimates: the collector stops following those, and a sweep's 10,000 were each full
        collection's to walk, in whichever thread, the UI's included."""
        if not queue:
            return {}
        active = tuple((r["id"], r["status"]) for r in self.store.active_runs())
        cached = self._estimated
        if (cached and cached[1][0] is queue and cached[1][1] == active
                and now - cached[0] < ESTIMATE_EVERY_S):
            return cached[2]
        from daemon.scheduling.estimate import queue_estimates

        try:
            value = {e.run_id: (e.start, e.end, e.basis)
                     for e in queue_estimates(self.store, now, medians=medians)}
        except (RngdctlError, ArithmeticError, KeyError, TypeError, ValueError) as exc:
            # Advice, never a crash: every row says why it has none.
            value = {r["id"]: (None, None, f"no estimate: {exc}") for r in queue}
        self._estimated = (now, (queue, active), value)
        return value
