"""The steady window of a run's steps (6-N: the first five carry warm-up, as allocation,
compile and caches) and the numbers a summary and a drift give."""

from __future__ import annotations

from dataclasses import asdict, dataclass

WARMUP_STEPS = 5


def steady(steps: list[dict], first: int = WARMUP_STEPS + 1) -> list[dict]:
    """Steps numbered ``first`` and later; all of them when the run is shorter."""
    tail = [s for s in steps if s["step"] >= first]
    return tail or list(steps)


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
