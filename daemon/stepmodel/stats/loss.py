"""The note's loss table: its step ranges, and its rows from a stored pass."""

from __future__ import annotations

from dataclasses import dataclass, fields
from itertools import count

from daemon.stepmodel.stats.order import median, median_of_sorted
from daemon.stepmodel.stats.steps import WARMUP_STEPS

#: A loss table longer than this widens its ranges after step 100.
MAX_LOSS_ROWS = 12


def loss_ranges(total_steps: int, max_rows: int = MAX_LOSS_ROWS) -> list[tuple[int, int]]:
    """Step ranges for the loss table: 1-25, 26-50, 51-100, then by 50, fitted to the run.

    A run stopped at 37 has no empty rows. A run too long for ``max_rows`` rows
    by 50 keeps the first three and then ends its ranges at multiples of the
    smallest round width (100, 200, 500, 1000, ...) that fits.
    """
    bounds = [25, 50, 100]
    while bounds[-1] < total_steps:
        bounds.append(bounds[-1] + 50)
    if len(bounds) > max_rows:
        for width in (m * 10 ** k for k in count(2) for m in (1, 2, 5)):
            ends = [*range(max(width, 200), total_steps, width), total_steps]
            if 3 + len(ends) <= max_rows:
                break
        bounds = [25, 50, 100, *ends]
    ranges, start = [], 1
    for end in bounds:
        if start > total_steps:
            break
        ranges.append((start, min(end, total_steps)))
        start = end + 1
    return ranges


@dataclass(frozen=True)
class LossRow:
    first: int
    last: int
    steps: int
    mean_loss: float | None
    median_step_s: float | None
    nonfinite: int = 0  # steps in the range whose loss is NaN, infinite or missing


def loss_table_of(store, run_id: int, label: str, total_steps: int) -> list[LossRow]:
    """The note's loss table of a stored pass, one row a range of ``loss_ranges``: sealed
    (``seal``), else from range sums and order statistics."""
    sealed = store.sealed_aggregates(run_id).get(f"loss_table:{label}:{total_steps}")
    names = {f.name for f in fields(LossRow)}
    if sealed is not None and all(set(row) == names for row in sealed):
        return [LossRow(**row) for row in sealed]
    return live_loss_table(store, run_id, label, total_steps)  # or sealed by an older rngdctl


def live_loss_table(store, run_id: int, label: str, total_steps: int) -> list[LossRow]:
    """``loss_table_of`` computed now from the indexes."""
    rows = []
    for first, last in loss_ranges(total_steps):
        n, finite, total = store.range_totals(run_id, label, first, last)
        if n <= 64 or first <= WARMUP_STEPS:
            times = store.range_step_s(run_id, label, first, last)
            middle = median(times)
        else:
            middle = median_of_sorted(n, lambda o, c, a=first, b=last:
                                      store.range_sorted_step_s(run_id, label, a, b, o, c))
        rows.append(LossRow(first, last, n, total / finite if finite else None, middle,
                            n - finite))
    return rows
