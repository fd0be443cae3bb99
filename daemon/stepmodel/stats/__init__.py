"""Run statistics computed from stored steps (steady state: steps 6-N), one idea a module,
every public name re-exported here: ``order`` (the one engine every median and quartile
goes through), ``steps`` (from decoded steps: the reference), ``passes`` (``PassStats``
from the store's aggregates), ``sealed`` (a finished run's, stored once), ``loss`` (the
note's loss table) and ``load`` (the host load's range)."""

from __future__ import annotations

from daemon.stepmodel.stats.load import gate_load_range, load_range
from daemon.stepmodel.stats.loss import (
    MAX_LOSS_ROWS,
    LossRow,
    live_loss_table,
    loss_ranges,
    loss_table_of,
)
from daemon.stepmodel.stats.order import (
    median,
    median_of_sorted,
    quartiles,
    quartiles_of_sorted,
    weighted_quantile,
)
from daemon.stepmodel.stats.passes import PassStats, live_pass_stats, pass_stats, steady_medians
from daemon.stepmodel.stats.sealed import seal, step_seconds
from daemon.stepmodel.stats.steps import WARMUP_STEPS, Drift, RunSummary, steady

__all__ = [
    "MAX_LOSS_ROWS", "WARMUP_STEPS", "Drift", "LossRow", "PassStats", "RunSummary",
    "gate_load_range", "live_loss_table", "live_pass_stats", "load_range", "loss_ranges",
    "loss_table_of", "median", "median_of_sorted", "pass_stats", "quartiles", "quartiles_of_sorted",
    "seal", "steady", "steady_medians", "step_seconds", "weighted_quantile",
]
