"""The TUI's view model: plain data built from the store, with no Textual in it.

A refresh worker calls ``ViewSource.build()`` in a thread and hands the
resulting ``Snapshot`` to the app, which only copies numbers into widgets.
Steps are read incrementally (only those after the last one seen) and plot
series are downsampled (``rngdctl.tui.series``) to a fixed number of buckets
keeping each bucket's minimum and maximum, so a 100,000-step run costs about
what a 100-step one does.

Modules, one idea each; import from the package, ``from rngdctl.tui.data import
...``, which re-exports every public name. ``ViewSource`` is composed of one
part per panel, each on ``reader.Reader`` (the store, the clock, the caches kept
between refreshes):

- ``views``: the view model, ``Snapshot`` and its parts (frozen plain data);
- ``host``: the daemon bar (liveness), daemon-level events, notices, device holders;
- ``cards``: each card's newest furiosa-smi reading and its last minutes, read incrementally;
- ``queue``: the head's gate check and the queue's rows with their estimates;
- ``runs``: the current run: its passes' series and plots, read incrementally;
- ``history``: the finished runs' rows, each read once, and the overlay's loss curves;
- ``predictions``: the step model's prediction and comparison of a run, cached;
- ``text``: small formatting shared by widgets and --snapshot (ages, numbers, glyphs).
"""

from __future__ import annotations

from daemon.scheduling import liveness
from daemon.scheduling import replicas as replicas_mod
from rngdctl.tui.data.cards import CARDS_WINDOW_S, CardViews
from rngdctl.tui.data.history import HISTORY_LIMIT, HistoryViews
from rngdctl.tui.data.host import DAEMON_EVENTS, HostViews
from rngdctl.tui.data.predictions import COMPARE_EVERY_S, predict_run
from rngdctl.tui.data.queue import ESTIMATE_EVERY_S, LOAD_WINDOW_S, QueueViews
from rngdctl.tui.data.runs import EVENTS_LIMIT, RunViews
from rngdctl.tui.data.text import (
    DAEMON_GLYPHS,
    STATUS_GLYPHS,
    VERDICT_GLYPHS,
    ago,
    clock_time,
    num,
    percent,
    run_label,
    status_text,
)
from rngdctl.tui.data.views import (
    CardRow,
    DaemonView,
    EventRow,
    GateRow,
    GatesView,
    HistoryRow,
    HolderRow,
    Predicted,
    QueueRow,
    RunView,
    Snapshot,
)


class ViewSource(HostViews, CardViews, QueueViews, RunViews, HistoryViews):
    """Builds snapshots from one store; keeps per-run caches between refreshes."""

    def build(self) -> Snapshot:
        now = self.clock()
        queue = self.queue()
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
            cards=self.cards(now, holders),
            daemon_events=self.daemon_events(),
            notices=self.notices(),
            replicas=replicas_mod.read(self.store, self.tick, now),
        )


__all__ = [
    "CARDS_WINDOW_S",
    "COMPARE_EVERY_S",
    "DAEMON_EVENTS",
    "DAEMON_GLYPHS",
    "ESTIMATE_EVERY_S",
    "EVENTS_LIMIT",
    "HISTORY_LIMIT",
    "LOAD_WINDOW_S",
    "STATUS_GLYPHS",
    "VERDICT_GLYPHS",
    "CardRow",
    "DaemonView",
    "EventRow",
    "GateRow",
    "GatesView",
    "HistoryRow",
    "HolderRow",
    "Predicted",
    "QueueRow",
    "RunView",
    "Snapshot",
    "ViewSource",
    "ago",
    "clock_time",
    "num",
    "percent",
    "predict_run",
    "run_label",
    "status_text",
]
