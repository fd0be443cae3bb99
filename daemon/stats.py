"""Run statistics computed from stored steps: the numbers a note reports.

Steady state is steps 6-N: the first five steps carry warm-up (allocation,
compile, cache fills) and are left out of medians, as in the reference record.
"""

from __future__ import annotations

import bisect
import math
import statistics
from array import array
from dataclasses import asdict, dataclass, field, fields

from trainer import records

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


#: A loss table longer than this widens its ranges after step 100.
MAX_LOSS_ROWS = 12


def _round_widths():
    scale = 100
    while True:
        yield from (scale, 2 * scale, 5 * scale)
        scale *= 10


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
        for width in _round_widths():
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


def loss_table(steps: list[dict], total_steps: int | None = None) -> list[LossRow]:
    total = total_steps or (max(s["step"] for s in steps) if steps else 0)
    rows = []
    for first, last in loss_ranges(total):
        chosen = [s for s in steps if first <= s["step"] <= last]
        finite = [s["loss"] for s in chosen if s["loss"] is not None and math.isfinite(s["loss"])]
        rows.append(LossRow(
            first, last, len(chosen),
            statistics.fmean(finite) if finite else None,
            statistics.median(s["step_s"] for s in chosen) if chosen else None,
            len(chosen) - len(finite),
        ))
    return rows


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


def load_range(samples: list[dict]) -> tuple[float, float] | None:
    """The 1-minute load's range over samples, raw or folded by compaction (one row per
    minute keeps the minute's load1_min and load1_max beside its mean)."""
    lows = [s.get("load1_min", s["load1"]) if s.get("n") else s["load1"] for s in samples]
    highs = [s.get("load1_max", s["load1"]) if s.get("n") else s["load1"] for s in samples]
    lows, highs = [x for x in lows if x is not None], [x for x in highs if x is not None]
    return (min(lows), max(highs)) if lows else None


def gate_load_range(checks: list[dict]) -> tuple[float, float] | None:
    """The host-load readings' range over gate checks, raw or folded by compaction (a run
    of identical verdicts keeps its readings' load_min and load_max)."""
    lows, highs = [], []
    for c in checks:
        if c.get("count") and c.get("load_min") is not None:
            lows.append(c["load_min"])
            highs.append(c["load_max"])
            continue
        for g in c["gates"]:
            if g["name"] == "host_load" and g["reading"] is not None:
                lows.append(g["reading"])
                highs.append(g["reading"])
    return (min(lows), max(highs)) if lows else None


# === The same medians, kept up to date as steps arrive ========================


class RunningMedian:
    """A median over values that arrive in batches, kept sorted (insort is a memmove).

    An ``array``, not a list: the garbage collector does not walk it, so a
    100,000-step run adds nothing to its pauses.
    """

    def __init__(self):
        self.values = array("d")

    def add(self, values: list[float]) -> None:
        if len(values) > 64:  # a first read: one merge sort beats 100,000 inserts
            self.values = array("d", sorted([*self.values, *values]))
            return
        for value in values:
            bisect.insort(self.values, value)

    def median(self) -> float | None:
        v, n = self.values, len(self.values)
        if not n:
            return None
        return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


class SteadyMedians:
    """``median_step_s`` and ``tokens_per_s`` of a growing run, without re-reading it.

    Fed (step, step_s, tokens) as steps arrive; gives what the batch functions
    above give for all the steps fed so far (tests check they agree).
    """

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


# === A pass's numbers from the store's aggregates ============================
# What summarize, drift, loss_table, stepmodel.fit and stepmodel.compare need,
# from order statistics that SQLite reads off its indexes (daemon/store/aggregates.py
# "step aggregates"): the same numbers as the functions above over a pass's
# decoded steps (tests check they agree on random runs), at a cost that does
# not grow with the run.

#: The phases a pass's aggregates carry (stepmodel's split less "unclaimed").
PASS_PHASES = records.PHASES


def median_of_sorted(n: int, at) -> float | None:
    """``statistics.median`` of n values, read through ``at(offset, count)`` in sorted order."""
    if not n:
        return None
    if n % 2:
        return at(n // 2, 1)[0]
    a, b = at(n // 2 - 1, 2)
    return (a + b) / 2


def quartiles_of_sorted(n: int, at) -> tuple[float, float] | None:
    """``quartiles`` (inclusive interpolation) of n values read through ``at``."""
    if n < 2:
        return (at(0, 1)[0],) * 2 if n else None
    out = []
    for i in (1, 3):
        j, delta = divmod(i * (n - 1), 4)
        a, b = at(j, 2)
        out.append((a * (4 - delta) + b * delta) / 4)
    return out[0], out[1]


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
            self.steady, lambda o, c: self._sorted("tokens", o, c, float(default))))

    def phase_iqr(self, phase: str) -> tuple[float, float] | None:
        """Quartiles of one phase over the steady steps (a missing phase read as 0.0).

        fwd_bwd's are kept (``fwd_bwd_iqr``); another phase's are read off the
        sorted values, four of them, at the same cost for any length.
        """
        if phase == "fwd_bwd" or self._sorted is None or not self.steady:
            return self.fwd_bwd_iqr if phase == "fwd_bwd" else None
        return quartiles_of_sorted(self.steady,
                                   lambda o, c: self._sorted(f"phase_{phase}", o, c, 0.0))

    def summary(self, steps_total: int | None = None) -> RunSummary:
        return RunSummary(self.steps, steps_total, self.median_step_s, self.iqr_step_s,
                          self.tokens_per_s, self.first_loss, self.last_loss,
                          self.nonfinite_losses)

    def drift(self) -> Drift:
        if not self.steps:
            return Drift(None, None, None, None)
        return Drift(self.early_median_s, self.median_step_s, self.slowest_s, self.slowest_step)

    #: Fields a sealed row does not keep: the newest step is one row to read.
    _NOT_SEALED = ("last", "_sorted", "_tokens_absent")
    _TUPLES = ("iqr_step_s", "fwd_bwd_iqr", "nonfinite_kinds", "step_span")

    def sealed(self, tokens_absent: int) -> dict:
        """What ``seal`` stores (a JSON object); ``tokens_absent``: steady 0-token steps."""
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in self._NOT_SEALED}
        return {**out, "tokens_absent": tokens_absent}

    @classmethod
    def from_sealed(cls, value: dict, *, last: dict | None = None,
                    at=None) -> PassStats | None:
        """The PassStats ``sealed`` gave; ``last`` and ``at`` as ``pass_stats`` reads them.

        None when the row's fields are not this version's (sealed by an older rngdctl):
        the caller computes the numbers instead.
        """
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
                  for p in PASS_PHASES}
        drifted = drift(steps)
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
            median_step_s=statistics.median(times) if times else None,
            iqr_step_s=quartiles(times),
            fwd_bwd_iqr=quartiles(phases["fwd_bwd"]),
            median_tokens=statistics.median(s["tokens"] for s in chosen) if chosen else None,
            first_loss=steps[0]["loss"] if steps else None,
            last_loss=steps[-1]["loss"] if steps else None,
            nonfinite_losses=len(bad),
            nonfinite_first=bad[0]["step"] if bad else None,
            nonfinite_kinds=tuple(kinds.values()),
            step_span=(steps[0]["step"], steps[-1]["step"]) if steps else None,
            slowest_s=drifted.slowest_s, slowest_step=drifted.slowest_step,
            early_median_s=drifted.early_median_s,
            phase_medians={p: statistics.median(v) for p, v in phases.items() if v},
            phase_counts={p: sum(1 for s in chosen if p in (s.get("phases") or {}))
                          for p in PASS_PHASES},
            last=steps[-1] if steps else None,
            _sorted=at,
        )


def pass_stats(store, run_id: int, label: str, *, last: int | None = None) -> PassStats:
    """A pass's numbers from the store's aggregates, at the same cost for any length.

    A finished run's come from its sealed row (``seal``), one read; a running
    run's from order statistics off the indexes (``live_pass_stats``), each
    walked from the nearest marker ingest keeps (daemon/store/markers.py): a
    step or none, whatever the pass's length.
    ``last``: only steps 6-``last`` (``stepmodel.compare``'s window for
    interleaved passes, as long as the baseline pass): those steps are read.
    """
    if last is None:
        sealed = store.sealed_aggregates(run_id).get(f"pass:{label}")
        p = None if sealed is None else PassStats.from_sealed(
            sealed, last=store.last_step(run_id, label), at=_sorted_reader(store, run_id, label))
        if p is not None:
            return p
    return live_pass_stats(store, run_id, label, last=last)


def _sorted_reader(store, run_id: int, label: str):
    def at(column, offset, count, absent_as=None):
        return store.steady_sorted(run_id, label, column, offset, count, absent_as=absent_as)
    return at


def live_pass_stats(store, run_id: int, label: str, *, last: int | None = None) -> PassStats:
    """``pass_stats`` computed now from the indexes and markers, whatever is sealed."""
    if last is not None:
        window = store.steps_until(run_id, label, last)
        if store.pass_counts(run_id, label)[1]:  # steps 6-N exist: the window is 6-last
            window = [s for s in window if s["step"] > WARMUP_STEPS]
        return PassStats.of_steps(window)
    n, n_steady = store.pass_counts(run_id, label)
    if not n_steady:  # nothing past warm-up: a handful of steps, read them
        return PassStats.of_steps(store.steps(run_id, label))

    at = _sorted_reader(store, run_id, label)

    def med(column, absent_as=None):
        return median_of_sorted(n_steady, lambda o, c: at(column, o, c, absent_as))

    first, last = store.steady_span(run_id, label)
    slowest_s, slowest_step = store.slowest_steady_step(run_id, label)
    first_loss, last_loss = store.end_losses(run_id, label)
    early = store.range_step_s(run_id, label, WARMUP_STEPS + 1, 25)
    nonfinite, nonfinite_first, kinds = store.nonfinite_losses(run_id, label)
    phase_absent = {p: store.steady_absent(run_id, label, f"phase_{p}") for p in PASS_PHASES}
    return PassStats(
        steps=n, steady=n_steady, first_step=first, last_step=last,
        median_step_s=med("step_s"),
        iqr_step_s=quartiles_of_sorted(n_steady, lambda o, c: at("step_s", o, c)),
        fwd_bwd_iqr=quartiles_of_sorted(n_steady, lambda o, c: at("phase_fwd_bwd", o, c, 0.0)),
        median_tokens=med("tokens"),
        first_loss=first_loss, last_loss=last_loss,
        nonfinite_losses=nonfinite, nonfinite_first=nonfinite_first,
        nonfinite_kinds=tuple(kinds), step_span=store.step_span(run_id, label),
        slowest_s=slowest_s, slowest_step=slowest_step,
        early_median_s=statistics.median(early) if early else None,
        phase_medians={p: med(f"phase_{p}", 0.0) for p in PASS_PHASES},
        phase_counts={p: n_steady - phase_absent[p] for p in PASS_PHASES},
        last=store.last_step(run_id, label),
        _sorted=at, _tokens_absent=store.steady_absent(run_id, label, "tokens"),
    )


def steady_medians(store, run_id: int, label: str) -> tuple[float | None, float | None]:
    """(median step seconds, tokens per second) over steps 6-N of a stored pass, from its
    aggregates: what ``SteadyMedians`` gives, without reading the steps."""
    sealed = store.sealed_aggregates(run_id).get(f"pass:{label}")
    p = None if sealed is None else PassStats.from_sealed(sealed)
    if p is not None:
        return p.median_step_s, p.tokens_per_s
    n_steady = store.pass_counts(run_id, label)[1]
    if not n_steady:
        p = PassStats.of_steps(store.steps(run_id, label))
        return p.median_step_s, p.tokens_per_s
    median_s = median_of_sorted(n_steady, lambda o, c: store.steady_sorted(
        run_id, label, "step_s", o, c))
    tokens = median_of_sorted(n_steady, lambda o, c: store.steady_sorted(
        run_id, label, "tokens", o, c))
    return median_s, (tokens / median_s if median_s and median_s > 0 else None)


def loss_table_of(store, run_id: int, label: str, total_steps: int) -> list[LossRow]:
    """``loss_table`` of a stored pass: sealed (``seal``), else from range sums and order
    statistics."""
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
            median = statistics.median(times) if times else None
        else:
            median = median_of_sorted(n, lambda o, c, a=first, b=last:
                                      store.range_sorted_step_s(run_id, label, a, b, o, c))
        rows.append(LossRow(first, last, n, total / finite if finite else None, median,
                            n - finite))
    return rows


# === Sealed: a finished run's numbers, computed once =========================
# A run that has ended does not change, so its numbers are computed when it
# ends and stored (daemon/store/aggregates.py "sealed aggregates"): afterwards show, the
# note, model and the TUI read one row whatever the run's length. A step
# stored later makes the row stale, and the readers above compute again.


def seal(store, run_id: int) -> None:
    """Compute and store the run's sealed aggregates (the daemon, when a run ends)."""
    steps = store.run_step_total(run_id)
    values: dict = {}
    for label in store.step_counts(run_id):
        if not store.pass_counts(run_id, label)[1]:
            continue  # no steps 6-N: a handful of steps, read as they are
        p = live_pass_stats(store, run_id, label)
        values[f"pass:{label}"] = p.sealed(store.steady_absent(run_id, label, "tokens"))
        if label == records.MAIN and p.step_span:
            total = p.step_span[1]  # the note's table: ranges up to the last step
            values[f"loss_table:{label}:{total}"] = [
                asdict(r) for r in live_loss_table(store, run_id, label, total)]
    from daemon.series import pass_plots  # series imports this module

    for label in store.step_counts(run_id):  # the TUI's plots of each pass
        values[f"plots:{label}"] = pass_plots(store, run_id, label).state()
    values["step_seconds"] = store.stepped_seconds(run_id)
    store.seal_aggregates(run_id, values, steps=steps)


def step_seconds(store, run_id: int) -> float:
    """The sum of step_s over every stored step of the run (sealed, else read)."""
    sealed = store.sealed_aggregates(run_id).get("step_seconds")
    return sealed if sealed is not None else store.stepped_seconds(run_id)

