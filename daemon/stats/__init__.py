"""Run statistics computed from stored steps: the numbers a note reports.

Steady state is steps 6-N: the first five steps carry warm-up (allocation,
compile, cache fills) and are left out of medians, as in the reference record.

Modules, one idea each; import from the package, ``from daemon import stats``,
which re-exports every public name:

- ``steps``: a run's numbers from its decoded steps (steady, medians, tok/s,
  quartiles, drift, the summary): the reference the aggregates agree with;
- ``loss``: the note's loss table, its ranges and its rows (from steps or a
  stored pass);
- ``load``: the host load's range over samples or gate checks;
- ``running``: the same medians kept up to date as steps arrive (the TUI);
- ``order``: order statistics (median, quartiles) through a sorted reader;
- ``passes``: a pass's numbers (``PassStats``) from the store's aggregates,
  at a cost that does not grow with the run;
- ``sealed``: a finished run's numbers, computed once and stored (``seal``).
"""

from __future__ import annotations

from daemon.stats.load import gate_load_range, load_range
from daemon.stats.loss import (
    MAX_LOSS_ROWS,
    LossRow,
    live_loss_table,
    loss_ranges,
    loss_table,
    loss_table_of,
)
from daemon.stats.order import median_of_sorted, quartiles_of_sorted
from daemon.stats.passes import (
    PASS_PHASES,
    PassStats,
    live_pass_stats,
    pass_stats,
    steady_medians,
)
from daemon.stats.running import RunningMedian, SteadyMedians
from daemon.stats.sealed import seal, step_seconds
from daemon.stats.steps import (
    WARMUP_STEPS,
    Drift,
    RunSummary,
    drift,
    median_step_s,
    quartiles,
    steady,
    summarize,
    tokens_per_s,
)

__all__ = [
    "MAX_LOSS_ROWS",
    "PASS_PHASES",
    "WARMUP_STEPS",
    "Drift",
    "LossRow",
    "PassStats",
    "RunSummary",
    "RunningMedian",
    "SteadyMedians",
    "drift",
    "gate_load_range",
    "live_loss_table",
    "live_pass_stats",
    "load_range",
    "loss_ranges",
    "loss_table",
    "loss_table_of",
    "median_of_sorted",
    "median_step_s",
    "pass_stats",
    "quartiles",
    "quartiles_of_sorted",
    "seal",
    "steady",
    "steady_medians",
    "step_seconds",
    "summarize",
    "tokens_per_s",
]
