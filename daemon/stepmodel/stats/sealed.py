"""Sealed: a finished run's numbers, computed once when it ends and stored
(daemon/store/aggregates.py), so that show, the note, model and the TUI read one row
whatever its length; a step stored later makes the row stale, and the readers compute."""

from __future__ import annotations

from dataclasses import asdict

from daemon.run.plots import pass_plots
from daemon.stepmodel.stats.loss import live_loss_table
from daemon.stepmodel.stats.passes import live_pass_stats
from trainer import records


def seal(store, run_id: int) -> None:
    """Compute and store the run's sealed aggregates (the daemon, when a run ends)."""
    steps = store.run_step_total(run_id)
    values: dict = {}
    for label in store.step_counts(run_id):
        values[f"plots:{label}"] = pass_plots(store, run_id, label).state()  # the TUI's
        if not store.pass_counts(run_id, label)[1]:
            continue  # no steps 6-N: a handful of steps, read as they are
        p = live_pass_stats(store, run_id, label)
        values[f"pass:{label}"] = p.sealed()
        if label == records.MAIN and p.step_span:
            total = p.step_span[1]  # the note's table: ranges up to the last step
            values[f"loss_table:{label}:{total}"] = [
                asdict(r) for r in live_loss_table(store, run_id, label, total)]
    values["step_seconds"] = store.stepped_seconds(run_id)
    store.seal_aggregates(run_id, values, steps=steps)


def step_seconds(store, run_id: int) -> float:
    """The sum of step_s over every stored step of the run (sealed, else read)."""
    sealed = store.sealed_aggregates(run_id).get("step_seconds")
    return sealed if sealed is not None else store.stepped_seconds(run_id)
