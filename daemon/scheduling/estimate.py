"""When will a queued run start and end? From the active run's progress and the step model.

``queue_estimates(store, now)`` walks the queue in launch order. The active
run ends after its steps left at its measured median step time (6-N); each
queued run then takes its predicted duration: the step model's step time for
its config (``stepmodel.model_config`` from the newest baseline of its model,
``plan.find_baseline``) times its steps, plus its baseline pass, plus the
start-up and wind-down the last done runs took beyond their steps. Every
estimate carries the basis it rests on. A run whose duration cannot be
predicted (no baseline for its model) gets no estimate, and neither does any
run behind it, since its start would rest on a guess.

``record_estimates`` stores the first estimate of each queued run;
``settle_estimate`` stores its error once the run has ended. The daemon calls
it every tick through ``EstimateRecorder``, which skips the walk while nothing
an estimate rests on changed (issue 13: 500 queued runs that cannot be
estimated cost ~15 ms a tick to walk again, for the same answer).
"""

from __future__ import annotations

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


def predicted_duration(store, run: dict) -> tuple[float | None, str]:
    """Seconds of steps the run's config will take, by the step model, and the basis."""
    from daemon import stepmodel
    from daemon.scheduling import plan

    c = run["config"]
    try:
        base = plan.find_baseline(store, str(c.get("model")))
        answer = stepmodel.model_config(store, base, cards=int(c["cards"]),
                                        resident=int(c["resident"]), seq_len=c.get("seq_len"),
                                        accum=c.get("accum"))
    except RngdctlError as exc:
        return None, f"no estimate: {str(exc).split(' (')[0]}"
    seconds = answer.prediction.step_s * int(c["steps"])
    basis = (f"{c['steps']} steps x {answer.prediction.step_s * 1e3:.1f} ms "
             f"(model, run {base} {answer.baseline.label})")
    if c.get("baseline"):
        n = baseline_steps(c)
        offload = stepmodel.model_config(store, base, cards=int(c["cards"]), resident=0,
                                         seq_len=c.get("seq_len"), accum=c.get("accum"))
        seconds += offload.prediction.step_s * n
        basis += f" + {n} baseline steps x {offload.prediction.step_s * 1e3:.1f} ms"
    return seconds, basis


def active_end(store, run: dict, now: float, overhead: float,
               median: float | None = None) -> tuple[float | None, str]:
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
        seconds, basis = predicted_duration(store, run)
        if seconds is None:
            return None, f"run {run['id']} (active): {basis}"
        started = run.get("started") or now
        return (max(now, started + overhead + seconds),
                f"run {run['id']} (active, no main steps yet): {basis}")
    left = max(0, total - span[1])
    return (now + left * median,
            f"run {run['id']} (active): {left} steps left x {median * 1e3:.1f} ms measured")


def queue_estimates(store, now: float, *, medians: dict[int, float] | None = None
                    ) -> list[Estimate]:
    """Position, estimated start and end of every queued run, in launch order.

    ``medians``: run id -> measured median step time (6-N) of its main pass, for an active
    run whose median the caller keeps already (``active_end``).
    """
    overhead, overhead_basis = overhead_s(store)
    cursor, ahead = now, []
    active = store.runs(ACTIVE)
    if active:
        cursor, basis = active_end(store, active[0], now, overhead,
                                   (medians or {}).get(active[0]["id"]))
        ahead.append(basis)
    ends: dict[int, float] = {}
    out = []
    for position, run in enumerate(store.queue(), start=1):
        if run["held"]:
            out.append(Estimate(run["id"], position, None, None, "held: no estimate"))
            continue
        if cursor is None:
            out.append(Estimate(run["id"], position, None, None,
                                "no estimate: a run ahead has none (" + ahead[-1] + ")"))
            continue
        seconds, basis = predicted_duration(store, run)
        if seconds is None:
            out.append(Estimate(run["id"], position, None, None, basis))
            cursor = None
            ahead.append(f"run {run['id']}: {basis}")
            continue
        start = cursor
        dep = run.get("after_run")
        if dep in ends:
            start = max(start, ends[dep])
        end = start + overhead + seconds
        rests = "; ".join([*ahead, f"this run: {basis}", overhead_basis])
        out.append(Estimate(run["id"], position, start, end, rests))
        ends[run["id"]] = end
        cursor = end
        ahead.append(f"run {run['id']}: {basis}")
    return out


def record_estimates(store, now: float, missing: set[int] | None = None) -> int:
    """Store the first estimate of every queued run that has none stored yet; how many were new.

    ``missing``: ``store.queued_without_estimate()`` when the caller has read it already.
    """
    missing = store.queued_without_estimate() if missing is None else missing
    if not missing:
        return 0
    n = 0
    for e in queue_estimates(store, now):
        if e.run_id in missing and e.start is not None:
            n += store.add_estimate(e.run_id, made=now, position=e.position, start=e.start,
                                    end=e.end, basis=e.basis)
    return n


class EstimateRecorder:
    """``record_estimates`` each tick, skipped while what the estimates rest on is unchanged.

    A queued run left without an estimate (held, no baseline for its model, or behind such
    a run) stays without one until the queue, a run's status, config or place, a finished
    run, or an active run's warm-up changes: ``store.estimate_inputs`` fingerprints those.
    Past the warm-up, an active run's further steps move estimates but make none possible.
    """

    def __init__(self) -> None:
        self._unchanged: tuple | None = None  # the fingerprint of a walk that stored nothing
        self.walks = 0  # queue walks made, for tests and the benchmark

    def record(self, store, now: float) -> int:
        missing = store.queued_without_estimate()
        if not missing:
            self._unchanged = None
            return 0
        from daemon.stepmodel import stats

        inputs = (frozenset(missing), store.estimate_inputs(stats.WARMUP_STEPS + 1))
        if inputs == self._unchanged:
            return 0
        self.walks += 1
        n = record_estimates(store, now, missing)
        # One that stored an estimate changed ``missing``: the next tick walks once more.
        self._unchanged = inputs if n == 0 else None
        return n
