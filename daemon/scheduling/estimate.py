"""When will a queued run start and end? From the active run's progress and the step model.

``queue_estimates(store, now)`` walks the queue in launch order. The active
run ends after its steps left at its measured median step time (6-N); each
queued run then takes its predicted duration: the step model's step time for
its config (``stepmodel.fitted`` from the newest baseline of its model,
``baselines.find_baseline``, once per model and config in a walk: ``Durations``)
times its steps, plus its baseline pass, plus the start-up and wind-down the
last done runs took beyond their steps. Every estimate carries the basis it
rests on, of a bounded length however long the queue (``AHEAD_NAMED``). A run
whose duration cannot be predicted (no baseline for its model) gets no
estimate, and neither does any run behind it, since its start would rest on a
guess.

``record_estimates`` stores the first estimate of each queued run;
``settle_estimate`` stores its error once the run has ended. The daemon calls
it every tick through ``EstimateRecorder``, which skips the walk while nothing
an estimate rests on changed (issue 13: 500 queued runs that cannot be
estimated cost ~15 ms a tick to walk again, for the same answer).
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass

from daemon.errors import RngdctlError
from daemon.run.spec import baseline_steps
from daemon.store import ACTIVE, DONE
from trainer.records import MAIN

#: How many recent done runs give the start-up and wind-down overhead.
OVERHEAD_RUNS = 5


@dataclass(frozen=True)
class Estimate:
    run_id: int
    position: int
    start: float | None  # epoch seconds; None: no estimate
    end: float | None
    basis: str  # what the estimate rests on, or why there is none

    def as_dict(self) -> dict:
        return asdict(self)


def overhead_s(store) -> tuple[float, str]:
    """Seconds a run takes beyond its steps (start-up, wind-down): median of the last done runs."""
    ended = [run for run in store.runs([DONE], limit=OVERHEAD_RUNS)
             if run.get("started") is not None and run.get("ended") is not None]
    if not ended:
        return 0.0, "no start-up measured yet (no done run)"
    import statistics  # only here: `runs` before any run is done loads no statistics

    from daemon.stepmodel import stats

    # stats.step_seconds: sealed once the run is done.
    extra = [max(0.0, run["ended"] - run["started"] - stats.step_seconds(store, run["id"]))
             for run in ended]
    return statistics.median(extra), (f"+{extra_text(statistics.median(extra))} start-up "
                                      f"(median of the last {len(extra)} done runs)")


def extra_text(s: float) -> str:
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


class Durations:
    """Predicted seconds of steps for the configs of one walk of the queue.

    Each model's baseline is found and fitted once, and each config priced once, whatever
    the queue's length: the store is read per model, not per queued run (issue 33: a
    ``find_baseline`` per queued run, each reading every run, made `runs` take 5.8 s with
    400 queued runs and more than 600 s with 10,000).
    """

    def __init__(self, store):
        self.store = store
        self._fitted: dict[str, tuple] = {}  # model -> (baseline run, Fitted) or (None, why)
        self._steps: dict[tuple, tuple] = {}  # (model, config) -> (step seconds, label) or why

    def _fit(self, model: str) -> tuple:
        if model not in self._fitted:
            from daemon import stepmodel
            from daemon.scheduling.baselines import find_baseline

            try:
                base = find_baseline(self.store, model)
                self._fitted[model] = (base, stepmodel.fitted(self.store, base))
            except RngdctlError as exc:
                self._fitted[model] = (None, str(exc))
        return self._fitted[model]

    def step_s(self, model: str, *, cards: int, resident: int, seq_len, accum
               ) -> tuple[float | None, str]:
        """(seconds a step, "run B pass": what priced it), or (None, why there is none)."""
        key = (model, cards, resident, seq_len, accum)
        if key not in self._steps:
            base, found = self._fit(model)
            if base is None:
                self._steps[key] = (None, found)
            else:
                try:
                    answer = found.price(cards=cards, resident=resident, seq_len=seq_len,
                                         accum=accum)
                    self._steps[key] = (answer.prediction.step_s,
                                        f"run {base} {answer.baseline.label}")
                except RngdctlError as exc:
                    self._steps[key] = (None, str(exc))
        return self._steps[key]


def predicted_duration(store, run: dict, durations: Durations | None = None
                       ) -> tuple[float | None, str]:
    """Seconds of steps the run's config will take, by the step model, and the basis.

    ``durations``: the walk's, so that a queue of one config fits its baseline once.
    """
    durations = durations or Durations(store)
    c = run["config"]
    model, cards = str(c.get("model")), int(c["cards"])
    step_s, priced = durations.step_s(model, cards=cards, resident=int(c["resident"]),
                                      seq_len=c.get("seq_len"), accum=c.get("accum"))
    if step_s is None:
        return None, f"no estimate: {priced.split(' (')[0]}"
    seconds = step_s * int(c["steps"])
    basis = f"{c['steps']} steps x {step_s * 1e3:.1f} ms (model, {priced})"
    if c.get("baseline"):
        n = baseline_steps(c)
        offload, why = durations.step_s(model, cards=cards, resident=0,
                                        seq_len=c.get("seq_len"), accum=c.get("accum"))
        if offload is None:
            return None, f"no estimate: {why.split(' (')[0]}"
        seconds += offload * n
        basis += f" + {n} baseline steps x {offload * 1e3:.1f} ms"
    return seconds, basis


def active_end(store, run: dict, now: float, overhead: float,
               median: float | None = None, durations: Durations | None = None
               ) -> tuple[float | None, str]:
    """When the active run should end: its steps left at its measured median step time.

    ``median``: that median (steps 6-N) when the caller already keeps it (the TUI does, as the
    run goes on); else from the pass's aggregates (``stats.steady_medians``). Never from its
    decoded steps: the TUI asks while a 100,000-step run goes on.
    """
    total = int(run["config"]["steps"])
    span = store.step_span(run["id"], MAIN)
    if span is not None and median is None:
        from daemon.stepmodel import stats

        median = stats.steady_medians(store, run["id"], MAIN)[0]
    if span is None or median is None:
        # Still in its baseline pass, or not started: its whole predicted duration from its start.
        seconds, basis = predicted_duration(store, run, durations)
        if seconds is None:
            return None, f"run {run['id']} (active): {basis}"
        started = run.get("started") or now
        return (max(now, started + overhead + seconds),
                f"run {run['id']} (active, no main steps yet): {basis}")
    left = max(0, total - span[1])
    return (now + left * median,
            f"run {run['id']} (active): {left} steps left x {median * 1e3:.1f} ms measured")


#: Queued runs ahead that an estimate's basis names one by one; those before them are
#: summed in one clause, so a basis stays one line however long the queue (issue 33).
AHEAD_NAMED = 3


def duration_text(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.1f} h"


class _Ahead:
    """What the runs ahead of a queued run rest on: the active run's end, the last
    ``AHEAD_NAMED`` queued runs each, and the count and predicted steps of those before."""

    def __init__(self) -> None:
        self.active: str | None = None
        self.named: deque[tuple[str, float]] = deque()
        self.earlier, self.earlier_s = 0, 0.0

    def add(self, run_id: int, basis: str, seconds: float) -> None:
        self.named.append((f"run {run_id}: {basis}", seconds))
        if len(self.named) > AHEAD_NAMED:
            self.earlier += 1
            self.earlier_s += self.named.popleft()[1]

    def clauses(self) -> list[str]:
        out = [self.active] if self.active else []
        if self.earlier:
            out.append(f"{self.earlier} queued run{'s' if self.earlier != 1 else ''} before "
                       f"those below: {duration_text(self.earlier_s)} of steps by the model")
        return out + [text for text, _ in self.named]


def queue_estimates(store, now: float, *, medians: dict[int, float] | None = None
                    ) -> list[Estimate]:
    """Position, estimated start and end of every queued run, in launch order.

    ``medians``: run id -> measured median step time (6-N) of its main pass, for an active
    run whose median the caller keeps already (``active_end``). Linear in the queue: its
    reads of the store do not grow with it (``Durations``; tests/queue/test_queue_scale.py).
    """
    overhead, overhead_basis = overhead_s(store)
    durations = Durations(store)
    cursor, ahead, blocked_by = now, _Ahead(), ""
    active = store.runs(ACTIVE)
    if active:
        cursor, ahead.active = active_end(store, active[0], now, overhead,
                                          (medians or {}).get(active[0]["id"]), durations)
        blocked_by = ahead.active
    ends: dict[int, float] = {}
    out = []
    for position, run in enumerate(store.queue(), start=1):
        if run["held"]:
            out.append(Estimate(run["id"], position, None, None, "held: no estimate"))
            continue
        if cursor is None:
            out.append(Estimate(run["id"], position, None, None,
                                f"no estimate: a run ahead has none ({blocked_by})"))
            continue
        seconds, basis = predicted_duration(store, run, durations)
        if seconds is None:
            out.append(Estimate(run["id"], position, None, None, basis))
            cursor, blocked_by = None, f"run {run['id']}: {basis}"
            continue
        start = cursor
        dep = run.get("after_run")
        if dep in ends:
            start = max(start, ends[dep])
        end = start + overhead + seconds
        rests = "; ".join([*ahead.clauses(), f"this run: {basis}", overhead_basis])
        out.append(Estimate(run["id"], position, start, end, rests))
        ends[run["id"]] = end
        cursor = end
        ahead.add(run["id"], basis, seconds)
    return out


def record_estimates(store, now: float, missing: set[int] | None = None) -> int:
    """Store the first estimate of every queued run that has none stored yet; how many were new.

    ``missing``: ``store.queued_without_estimate()`` when the caller has read it already.
    """
    missing = store.queued_without_estimate() if missing is None else missing
    return len(_record(store, now, missing)) if missing else 0


def _record(store, now: float, missing: set[int]) -> set[int]:
    """The runs of ``missing`` given their first estimate now (one write for them all)."""
    new = [e for e in queue_estimates(store, now) if e.run_id in missing and e.start is not None]
    store.add_estimates([(e.run_id, now, e.position, e.start, e.end, e.basis) for e in new])
    return {e.run_id for e in new}


class EstimateRecorder:
    """``record_estimates`` each tick, skipped while what the estimates rest on is unchanged.

    A queued run left without an estimate (held, no baseline for its model, or behind such
    a run) stays without one until the queue, a run's status, config or place, a finished
    run, or an active run's warm-up changes: ``store.estimate_inputs`` fingerprints those.
    Past the warm-up, an active run's further steps move estimates but make none possible.
    """

    def __init__(self) -> None:
        self._unchanged: tuple | None = None  # the fingerprint of the last walk's outcome
        self.walks = 0  # queue walks made, for tests and the benchmark

    def record(self, store, now: float) -> int:
        missing = store.queued_without_estimate()
        if not missing:
            self._unchanged = None
            return 0
        from daemon.stepmodel import stats

        inputs = store.estimate_inputs(stats.WARMUP_STEPS + 1)
        if (frozenset(missing), inputs) == self._unchanged:
            return 0
        self.walks += 1
        stored = _record(store, now, missing)
        # The inputs hold no estimate: the runs still missing one after this walk are
        # those it could not estimate, and stay so until the inputs change (a second walk
        # for the same answer cost 200 ms a tick with 10,000 queued runs, issue 33).
        self._unchanged = (frozenset(missing - stored), inputs)
        return len(stored)
