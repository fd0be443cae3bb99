"""The current run: its passes' series and plots, read incrementally, and its panel's figures."""

from __future__ import annotations

import os
from pathlib import Path

from daemon.run import output
from daemon.run.spec import baseline_steps
from daemon.stepmodel import stats
from daemon.stepmodel.compare import finite
from daemon.store import ACTIVE, FINISHED
from rngdctl.tui.data.predictions import Predictions, _top_terms
from rngdctl.tui.data.text import _int
from rngdctl.tui.data.views import RunView
from rngdctl.tui.series import HeldOutSeries, PassSeries
from trainer import records
from trainer.ownership import CLAIM_NAME

EVENTS_LIMIT = 8


class RunViews(Predictions):
    """The current-run panel: the run shown, its pass's plots, medians, phases and events."""

    def _pass_series(self, run_id: int, label: str) -> PassSeries:
        series = self._series.get((run_id, label))
        first = series is None
        if first:
            series = self._series[(run_id, label)] = self._first_read(run_id, label)
        # In chunks: a long run's first read stays small in memory.
        new = series.read(self.store, run_id, label)
        if not (new or first):
            return series
        if series.restored and series.count != self.store.step_counts(run_id).get(label, 0):
            # A step stored out of order, before the newest the plots held: read
            # the pass whole, as a pass without stored plots.
            series = self._series[(run_id, label)] = PassSeries(self.buckets)
            series.read(self.store, run_id, label)
        # The aggregates: a sealed row, or a running pass's markers.
        series.medians = stats.steady_medians(self.store, run_id, label)
        return series

    def _first_read(self, run_id: int, label: str) -> PassSeries:
        """The pass's stored plots: sealed when the run ended (``stats.seal``), else kept at
        ingest (``plots.keep_plots``); one row for a run of any length. Empty plots where
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

    def _held_out_series(self, run_id: int, label: str) -> HeldOutSeries:
        series = self._held_out.get((run_id, label))
        if series is None:
            series = self._held_out[(run_id, label)] = HeldOutSeries(self.buckets)
        series.read(self.store, run_id, label)
        return series

    def _output(self, run: dict) -> output.RunOutput:
        """The run's output, read again only when the store has a new event (its folder,
        checkpoints and resumes all come from the run's events), or its folder's
        ``rngdctl.json`` changed (another run writing over it is no event of ours)."""
        newest = self.store.last_event_id()
        kept = self._outputs.get(run["id"])  # (newest event id, claim stamp, RunOutput)
        if kept is None or kept[0] != newest or kept[1] != _claim_stamp(kept[2]):
            found = output.run_output(self.store, run, Path(self.home) / output.RUNS)
            kept = self._outputs[run["id"]] = (newest, _claim_stamp(found), found)
        return kept[2]

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

    def run_view(self, run: dict, now: float) -> RunView:
        config = run["config"] or {}
        main = self._pass_series(run["id"], records.MAIN)
        label, series = records.MAIN, main
        if not main.count and config.get("baseline"):
            baseline = self._pass_series(run["id"], records.BASELINE)
            if baseline.count:
                label, series = records.BASELINE, baseline
        median_s, tok_s = series.medians
        if label == records.BASELINE:
            steps_total = _baseline_steps(config)
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
        found = self._output(run)
        held = self._held_out_series(run["id"], label)
        # What `show` and the note say (stepmodel.for_run): the model against the figure
        # it compares, named; never the error against the median beside it.
        compared = self._comparison(run, now) if predicted is not None else None
        return RunView(
            run_id=run["id"], name=run.get("name"), status=run["status"], config=config,
            label=label, step=step, steps_total=steps_total, eta=eta, median_s=median_s,
            tok_s=tok_s, model_s=model_s, error=compared.error if compared else None,
            last_loss=series.last_loss, phases=phases,
            loss=series.loss_plot.series(), step_time=series.time_plot.series(),
            events=events, started=run.get("started"), ended=run.get("ended"),
            exit_reason=run.get("exit_reason"), log_path=run.get("log_path"),
            error_terms=_top_terms(compared.error_terms()) if compared else None,
            host_notice=compared.short_notice() if compared else None,
            interval=finite(compared.interval) if compared else None,
            output=output.model_words(found, finished=run["status"] in FINISHED),
            resumes=output.resumes_words(found), held_out=held.plot.series(),
            held_out_loss=held.last_loss, held_out_step=held.last if held.last >= 0 else None,
            measured_s=compared.measured_s if compared else None,
            measured_name=compared.measured_name if compared else None,
        )


def _claim_stamp(found: output.RunOutput) -> tuple | None:
    """When and how the model folder's ``rngdctl.json`` last changed (one stat)."""
    try:
        st = os.stat(Path(found.model.path) / CLAIM_NAME)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _baseline_steps(config: dict) -> int | None:
    """The baseline pass's steps by submit's rule; None for a config that cannot say."""
    try:
        return baseline_steps(config)
    except (KeyError, TypeError, ValueError):
        return None
