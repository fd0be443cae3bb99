"""A pass's numbers (``PassStats``) from the store's aggregates, at a cost that does not grow
with the run: order statistics SQLite reads off its indexes (daemon/store/aggregates.py),
the same numbers as ``steps.py``'s over the decoded steps (tests check they agree)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import partial

from daemon.stepmodel.stats.order import median, median_of_sorted, quartiles_of_sorted
from daemon.stepmodel.stats.steps import WARMUP_STEPS, Drift, RunSummary, steady
from trainer.records import PHASES


@dataclass(frozen=True)
class PassStats:
    """One pass's numbers over its steady steps (6-N, or all when it has none)."""

    steps: int  # every step of the pass
    steady: int  # the steps the medians are over
    first_step: int | None  # of those
    last_step: int | None
    median_step_s: float | None
    iqr_step_s: tuple[float, float] | None
    fwd_bwd_iqr: tuple[float, float] | None  # quartiles of the device compute phase
    median_tokens: float | None
    first_loss: float | None
    last_loss: float | None
    nonfinite_losses: int
    nonfinite_first: int | None  # the first step with a non-finite loss
    nonfinite_kinds: tuple  # the distinct non-finite losses (NaN, infinities, None)
    step_span: tuple[int, int] | None  # the first and last step numbers of the pass
    slowest_s: float | None
    slowest_step: int | None
    early_median_s: float | None  # steps 6-25
    phase_medians: dict  # phase -> median seconds, a missing phase read as 0.0
    phase_counts: dict  # phase -> steady steps that have it
    last: dict | None  # the newest step, as Store.steps gives it
    #: (column, offset, count, absent_as) -> sorted values: for fit's tokens
    _sorted: object = field(default=None, compare=False, repr=False)
    #: steady steps with 0 tokens, where known (sealed): none, and fit's tokens need no walk
    _tokens_absent: int | None = field(default=None, compare=False, repr=False)

    @property
    def tokens_per_s(self) -> float | None:
        """Median tokens per step over the median step time (``tokens_per_s``)."""
        if self.median_tokens is None or not self.median_step_s or self.median_step_s <= 0:
            return None
        return self.median_tokens / self.median_step_s

    def median_tokens_or(self, default: float) -> float:
        """The median of the steady steps' tokens, a 0-token step counted as ``default``."""
        if self._tokens_absent == 0 and self.median_tokens is not None:
            return float(self.median_tokens)  # no 0-token step: the plain median
        return float(median_of_sorted(
            self.steady, lambda o, c: self._sorted("tokens", o, c, absent_as=float(default))))

    def summary(self, steps_total: int | None = None) -> RunSummary:
        return RunSummary(self.steps, steps_total, self.median_step_s, self.iqr_step_s,
                          self.tokens_per_s, self.first_loss, self.last_loss,
                          self.nonfinite_losses)

    def drift(self) -> Drift:
        return Drift(self.early_median_s, self.median_step_s, self.slowest_s, self.slowest_step)

    #: Fields a sealed row does not keep: the newest step is one row to read.
    _NOT_SEALED = ("last", "_sorted", "_tokens_absent")
    _TUPLES = ("iqr_step_s", "fwd_bwd_iqr", "nonfinite_kinds", "step_span")

    def sealed(self) -> dict:
        """What ``seal`` stores (a JSON object) of stats ``live_pass_stats`` gave."""
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in self._NOT_SEALED}
        return {**out, "tokens_absent": self._tokens_absent}

    @classmethod
    def from_sealed(cls, value: dict, *, last: dict | None = None,
                    at=None) -> PassStats | None:
        """The PassStats ``sealed`` gave (``last`` and ``at`` as ``pass_stats`` reads them);
        None for a row an older rngdctl sealed with other fields: the caller computes."""
        kw = {k: v for k, v in value.items() if k != "tokens_absent"}
        if set(kw) | set(cls._NOT_SEALED) != {f.name for f in fields(cls)} \
                or "tokens_absent" not in value:
            return None
        for name in cls._TUPLES:
            if kw[name] is not None:
                kw[name] = tuple(kw[name])
        return cls(**kw, last=last, _sorted=at, _tokens_absent=value["tokens_absent"])

    @classmethod
    def of_steps(cls, steps: list[dict]) -> PassStats:
        """The same numbers from decoded steps (the reference, and passes shorter than 6)."""
        chosen = steady(steps)
        times = sorted(s["step_s"] for s in chosen)
        phases = {p: sorted(float((s.get("phases") or {}).get(p, 0.0)) for s in chosen)
                  for p in PHASES}
        slowest = max(chosen, key=lambda s: s["step_s"], default=None)
        bad = [s for s in steps if s["loss"] is None or not math.isfinite(s["loss"])]
        kinds = {"none" if s["loss"] is None else repr(s["loss"]): s["loss"] for s in bad}

        def values(column: str, absent_as: float | None) -> list:
            if column == "step_s":
                return times
            if column == "tokens":
                return sorted(s["tokens"] if absent_as is None else float(s["tokens"] or absent_as)
                              for s in chosen)
            return phases[column.removeprefix("phase_")]

        def at(column, offset, count, absent_as=None):
            return values(column, absent_as)[offset:offset + count]

        return cls(
            steps=len(steps), steady=len(chosen),
            first_step=chosen[0]["step"] if chosen else None,
            last_step=chosen[-1]["step"] if chosen else None,
            **_ordered(len(chosen), at),
            first_loss=steps[0]["loss"] if steps else None,
            last_loss=steps[-1]["loss"] if steps else None,
            nonfinite_losses=len(bad),
            nonfinite_first=bad[0]["step"] if bad else None,
            nonfinite_kinds=tuple(kinds.values()),
            step_span=(steps[0]["step"], steps[-1]["step"]) if steps else None,
            slowest_s=slowest and slowest["step_s"], slowest_step=slowest and slowest["step"],
            early_median_s=median(s["step_s"] for s in chosen if s["step"] <= 25),
            phase_counts={p: sum(1 for s in chosen if p in (s.get("phases") or {}))
                          for p in PHASES},
            last=steps[-1] if steps else None,
            _sorted=at,
        )


def pass_stats(store, run_id: int, label: str) -> PassStats:
    """A pass's numbers: a finished run's from its sealed row (``seal``), a running run's
    from order statistics off the indexes, each walked from the nearest marker ingest keeps
    (``live_pass_stats``)."""
    sealed = store.sealed_aggregates(run_id).get(f"pass:{label}")
    p = None if sealed is None else PassStats.from_sealed(
        sealed, last=store.last_step(run_id, label), at=partial(store.steady_sorted, run_id, label))
    return p if p is not None else live_pass_stats(store, run_id, label)


def live_pass_stats(store, run_id: int, label: str) -> PassStats:
    """``pass_stats`` computed now from the indexes and markers, whatever is sealed."""
    n, n_steady = store.pass_counts(run_id, label)
    if not n_steady:  # nothing past warm-up: a handful of steps, read them
        return PassStats.of_steps(store.steps(run_id, label))

    at = partial(store.steady_sorted, run_id, label)
    first, last = store.steady_span(run_id, label)
    slowest_s, slowest_step = store.slowest_steady_step(run_id, label)
    first_loss, last_loss = store.end_losses(run_id, label)
    early = store.range_step_s(run_id, label, WARMUP_STEPS + 1, 25)
    nonfinite, nonfinite_first, kinds = store.nonfinite_losses(run_id, label)
    phase_absent = {p: store.steady_absent(run_id, label, f"phase_{p}") for p in PHASES}
    return PassStats(
        steps=n, steady=n_steady, first_step=first, last_step=last, **_ordered(n_steady, at),
        first_loss=first_loss, last_loss=last_loss,
        nonfinite_losses=nonfinite, nonfinite_first=nonfinite_first,
        nonfinite_kinds=tuple(kinds), step_span=store.step_span(run_id, label),
        slowest_s=slowest_s, slowest_step=slowest_step,
        early_median_s=median(early),
        phase_counts={p: n_steady - phase_absent[p] for p in PHASES},
        last=store.last_step(run_id, label),
        _sorted=at, _tokens_absent=store.steady_absent(run_id, label, "tokens"),
    )


def _ordered(n: int, at) -> dict:
    """A pass's order statistics over its ``n`` steady steps, read through ``at(column,
    offset, count, absent_as=)``: one path for the store's indexes and for decoded steps."""
    def med(column, absent_as=None):
        return median_of_sorted(n, lambda o, c: at(column, o, c, absent_as=absent_as))

    return {"median_step_s": med("step_s"),
            "iqr_step_s": quartiles_of_sorted(n, lambda o, c: at("step_s", o, c)),
            "fwd_bwd_iqr": quartiles_of_sorted(
                n, lambda o, c: at("phase_fwd_bwd", o, c, absent_as=0.0)),
            "median_tokens": med("tokens"),
            "phase_medians": {p: med(f"phase_{p}", 0.0) for p in PHASES} if n else {}}


def steady_medians(store, run_id: int, label: str) -> tuple[float | None, float | None]:
    """(median step seconds, tokens per second) over steps 6-N of a stored pass, from its
    aggregates, without reading the steps (the TUI, each refresh)."""
    sealed = store.sealed_aggregates(run_id).get(f"pass:{label}")
    p = None if sealed is None else PassStats.from_sealed(sealed)
    n_steady = store.pass_counts(run_id, label)[1] if p is None else 0
    if n_steady:  # running: the two medians off the indexes, not all of live_pass_stats
        at = partial(store.steady_sorted, run_id, label)
        median_s = median_of_sorted(n_steady, lambda o, c: at("step_s", o, c))
        tokens = median_of_sorted(n_steady, lambda o, c: at("tokens", o, c))
        return median_s, (tokens / median_s if median_s and median_s > 0 else None)
    p = p or PassStats.of_steps(store.steps(run_id, label))
    return p.median_step_s, p.tokens_per_s
