"""Smoothing a loss curve for the history's overlay: a debiased EMA or a moving average.

Pure functions over the logged losses in step order (no Textual). Each rule
says what it computes in ``Smoothing.rule``, which the overlay prints on the
plot, so a reader never has to guess what a smoothed line means.

- Debiased EMA (as Adam debiases its moments, and as TensorBoard smooths):
  ``m_t = beta * m_(t-1) + (1 - beta) * y_t`` from ``m_0 = 0``, shown as
  ``m_t / (1 - beta^t)``. Without the division the first points would be pulled
  towards 0; with it the first point is ``y_1`` itself.
- Moving average: the mean of the last ``window`` points, fewer at the start
  (the first point is ``y_1``, the second the mean of two, ...), so the line
  starts where the run starts instead of ``window`` steps late.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NONE, EMA, MOVING_AVERAGE = "none", "ema", "ma"


def debiased_ema(values: Sequence[float], beta: float) -> list[float]:
    """``m_t / (1 - beta^t)`` with ``m_t = beta m_(t-1) + (1 - beta) y_t``, ``m_0 = 0``."""
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"beta must be in [0, 1), got {beta}")
    out = []
    m, power = 0.0, 1.0
    for y in values:
        m = beta * m + (1.0 - beta) * y
        power *= beta
        out.append(m / (1.0 - power))
    return out


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """The mean of the last ``window`` values at each point (of all so far at the start)."""
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    out = []
    total = 0.0
    for i, y in enumerate(values):
        total += y
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


@dataclass(frozen=True)
class Smoothing:
    """One smoothing rule: ``kind`` (none, ema, ma) and its parameter (beta, or window)."""

    kind: str = NONE
    param: float = 0.0

    def apply(self, values: Sequence[float]) -> list[float]:
        if self.kind == EMA:
            return debiased_ema(values, self.param)
        if self.kind == MOVING_AVERAGE:
            return moving_average(values, int(self.param))
        return list(values)

    @property
    def label(self) -> str:
        """Short, for the plot's title."""
        if self.kind == EMA:
            return f"debiased EMA, beta {self.param:g}"
        if self.kind == MOVING_AVERAGE:
            return f"moving average of {int(self.param)} steps"
        return "raw, no smoothing"

    @property
    def rule(self) -> str:
        """The whole rule, for the line under the plot."""
        if self.kind == EMA:
            b = f"{self.param:g}"
            return (f"debiased EMA: m_t = {b}·m_(t-1) + {1 - self.param:g}·loss_t, m_0 = 0; "
                    f"plotted m_t / (1 - {b}^t)")
        if self.kind == MOVING_AVERAGE:
            n = int(self.param)
            return (f"moving average: the mean of the last {n} logged losses "
                    "(fewer at the start: the mean of those so far)")
        return "raw: every logged loss as the trainer wrote it"


#: What `s` cycles through in the overlay, in order.
PRESETS = (Smoothing(), Smoothing(EMA, 0.9), Smoothing(EMA, 0.99),
           Smoothing(MOVING_AVERAGE, 10), Smoothing(MOVING_AVERAGE, 100))


def next_preset(current: Smoothing) -> Smoothing:
    """The preset after ``current`` (the first after the last, or after one not in the list)."""
    try:
        return PRESETS[(PRESETS.index(current) + 1) % len(PRESETS)]
    except ValueError:
        return PRESETS[0]
