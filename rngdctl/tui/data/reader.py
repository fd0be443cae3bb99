"""What every part of the view source shares: the store, the clock and the caches kept
between refreshes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from daemon.run.output import RunOutput
from daemon.store import Store
from rngdctl.tui.data.views import HistoryRow, Predicted
from rngdctl.tui.series import PLOT_BUCKETS, HeldOutSeries, LossCurve, PassSeries


class Reader:
    """One store read for the monitor; per-run caches kept between refreshes."""

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
        #: The queue as stored and decoded, and its rows with the estimates they were made with.
        self._queue: tuple[list, list[dict]] | None = None
        self._queue_shown: tuple[list[dict], dict, tuple] | None = None
        self._event_cursor: int | None = None
        self._curves: dict[int, LossCurve] = {}
        self._held_out: dict[tuple[int, str], HeldOutSeries] = {}
        #: A run's output (daemon/run/output.py), and the store's newest event id when it was read.
        self._outputs: dict[int, tuple[int, tuple | None, RunOutput]] = {}
