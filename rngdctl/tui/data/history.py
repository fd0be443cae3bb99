"""The finished runs: the history's rows, each read once, and the overlay's loss curves."""

from __future__ import annotations

import math

from daemon.run.plots import SERIES_CHUNK
from daemon.stepmodel import stats
from daemon.store import FINISHED
from rngdctl.tui.data.predictions import Predictions
from rngdctl.tui.data.text import _int, run_label
from rngdctl.tui.data.views import HistoryRow
from rngdctl.tui.series import LossCurve
from trainer import records

HISTORY_LIMIT = 50


class HistoryViews(Predictions):
    """The history panel and its overlay of loss curves."""

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
        # The error as the run panel, show and the note give it: the model against the
        # figure stepmodel.for_run compares (the paired estimate where the passes
        # interleaved), never against the median beside it. A finished run's comparison
        # is read once.
        compared = self._comparison(run, 0.0) if predicted is not None else None
        return HistoryRow(
            run_id=run["id"], name=run.get("name"), status=run["status"],
            steps_done=steps_done, steps_total=_int(config.get("steps")),
            median_s=median_s, tok_s=tok_s,
            model_s=compared.model_s if compared else None,
            error=compared.error if compared else None, ended=run.get("ended"),
            model=config.get("model"),
            measured_s=compared.measured_s if compared else None,
            measured_name=compared.measured_name if compared else None,
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
