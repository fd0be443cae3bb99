"""The same medians, kept up to date as steps arrive (the TUI's running pass)."""

from __future__ import annotations

import bisect
from array import array

from daemon.stats.order import median_of_sorted
from daemon.stats.steps import WARMUP_STEPS


class RunningMedian:
    """A median over values that arrive in batches, kept sorted (insort is a memmove) in an
    ``array``, which the garbage collector does not walk (no pauses at 100,000 steps)."""

    def __init__(self):
        self.values = array("d")

    def add(self, values: list[float]) -> None:
        if len(values) > 64:  # a first read: one merge sort beats 100,000 inserts
            self.values = array("d", sorted([*self.values, *values]))
            return
        for value in values:
            bisect.insort(self.values, value)

    def median(self) -> float | None:
        return median_of_sorted(len(self.values), lambda o, c: self.values[o:o + c])


class SteadyMedians:
    """``median_step_s`` and ``tokens_per_s`` of a growing run, fed (step, step_s, tokens)
    as steps arrive: what ``steps.py`` gives for the steps so far (tests check they agree)."""

    def __init__(self, first: int = WARMUP_STEPS + 1):
        self.first = first
        self._steady = (RunningMedian(), RunningMedian())
        self._warm = (RunningMedian(), RunningMedian())

    def add(self, rows: list[tuple[int, float, int]]) -> None:
        steady = [(s, t) for step, s, t in rows if step >= self.first]
        warm = [(s, t) for step, s, t in rows if step < self.first]
        for medians, chosen in ((self._steady, steady), (self._warm, warm)):
            if chosen:
                medians[0].add([s for s, _ in chosen])
                medians[1].add([t for _, t in chosen])

    def medians(self) -> tuple[float | None, float | None]:
        """(median step seconds, tokens per second) over steps 6-N, else over all."""
        step_s, tokens = self._steady if self._steady[0].values else self._warm
        median_s, median_tokens = step_s.median(), tokens.median()
        tok_s = median_tokens / median_s if median_s and median_tokens is not None else None
        return median_s, tok_s
