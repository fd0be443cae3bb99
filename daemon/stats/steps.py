"""A run's numbers from its decoded steps: the reference the store's aggregates agree with.

Steady state is steps 6-N: the first five steps carry warm-up (allocation,
compile, cache fills) and are left out of medians, as in the reference record.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

WARMUP_STEPS = 5


def steady(steps: list[dict], first: int = WARMUP_STEPS + 1) -> list[dict]:
    """Steps numbered ``first`` and later; all of them when the run is shorter."""
    tail = [s for s in steps if s["step"] >= first]
    return tail or list(steps)


def median_step_s(steps: list[dict], first: int = WARMUP_STEPS + 1,
                  last: int | None = None) -> float | None:
    chosen = [s["step_s"] for s in steady(steps, first)
              if last is None or s["step"] <= last]
    return statistics.median(chosen) if chosen else None


def tokens_per_s(steps: list[dict], first: int = WARMUP_STEPS + 1) -> float | None:
    """Median tokens per step over the median step time of the same steps."""
    chosen = steady(steps, first)
    if not chosen:
        return None
    median_s = statistics.median(s["step_s"] for s in chosen)
    median_tokens = statistics.median(s["tokens"] for s in chosen)
    return median_tokens / median_s if median_s > 0 else None


def quartiles(values: list[float]) -> tuple[float, float] | None:
    if len(values) < 2:
        return (values[0], values[0]) if values else None
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


@dataclass(frozen=True)
class Drift:
    early_median_s: float | None  # steps 6-25
    median_s: float | None  # steps 6-N
    slowest_s: float | None
    slowest_step: int | None

    @property
    def ratio(self) -> float | None:
        if not self.early_median_s or not self.median_s:
            return None
        return self.median_s / self.early_median_s


def drift(steps: list[dict]) -> Drift:
    if not steps:
        return Drift(None, None, None, None)
    slowest = max(steady(steps), key=lambda s: s["step_s"])
    return Drift(median_step_s(steps, last=25), median_step_s(steps),
                 slowest["step_s"], slowest["step"])


@dataclass(frozen=True)
class RunSummary:
    steps_done: int
    steps_total: int | None
    median_step_s: float | None
    iqr_step_s: tuple[float, float] | None
    tokens_per_s: float | None
    first_loss: float | None
    last_loss: float | None
    nonfinite_losses: int

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(steps: list[dict], steps_total: int | None = None) -> RunSummary:
    chosen = steady(steps)
    return RunSummary(
        steps_done=len(steps),
        steps_total=steps_total,
        median_step_s=median_step_s(steps),
        iqr_step_s=quartiles([s["step_s"] for s in chosen]),
        tokens_per_s=tokens_per_s(steps),
        first_loss=steps[0]["loss"] if steps else None,
        last_loss=steps[-1]["loss"] if steps else None,
        nonfinite_losses=sum(1 for s in steps
                             if s["loss"] is None or not math.isfinite(s["loss"])),
    )
