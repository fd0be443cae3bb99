"""Two runs side by side: the config values that differ, step time, tok/s and loss deltas.

``rngdctl diff A B`` is thin over ``diff_runs``. Medians, tok/s and the loss
table come from ``daemon.stepmodel.stats`` (steps 6-N, the note's loss ranges); the
config comparison from ``daemon.run.spec.config_diff``; the held-out loss beside
the train loss from ``daemon.run.output`` (each range's newest evaluation, as the
note's loss table).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from daemon.run import output
from daemon.run.spec import config_diff
from daemon.stepmodel import stats
from trainer.records import MAIN


def _delta(a: float | None, b: float | None) -> tuple[float | None, float | None]:
    """(b - a, (b - a) / a); None where a number is missing."""
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return None, None
    return b - a, ((b - a) / a if a else None)


@dataclass(frozen=True)
class Side:
    id: int
    name: str | None
    status: str
    steps_done: int
    steps_total: int | None
    median_step_s: float | None
    tokens_per_s: float | None
    last_loss: float | None


@dataclass(frozen=True)
class LossRow:
    first: int
    last: int
    a: float | None  # mean loss over the range (finite losses), run A
    b: float | None
    delta: float | None  # b - a
    a_steps: int  # steps each run has in the range: the means are like for like only when equal
    b_steps: int
    a_held_out: float | None = None  # the range's newest held-out loss, run A
    b_held_out: float | None = None
    held_out_delta: float | None = None  # b - a


@dataclass(frozen=True)
class Diff:
    a: Side
    b: Side
    config: dict  # key -> (A's value, B's value), only the keys that differ
    step_s_delta: tuple  # (b - a seconds, relative)
    tokens_per_s_delta: tuple
    common_step: int | None  # the last step both reached
    loss_at_common: tuple  # (A's loss, B's loss) at common_step
    loss_delta: float | None  # B - A at common_step
    loss_rows: tuple
    held_out_step: int | None = None  # the last step both runs have a held-out loss at
    held_out_at: tuple = (None, None)  # (A's held-out loss, B's) at held_out_step
    held_out_delta: float | None = None  # B - A at held_out_step

    def as_dict(self) -> dict:
        return {
            "a": asdict(self.a), "b": asdict(self.b),
            "config": {k: {"a": va, "b": vb} for k, (va, vb) in self.config.items()},
            "step_s_delta": {"seconds": self.step_s_delta[0], "relative": self.step_s_delta[1]},
            "tokens_per_s_delta": {"tokens_per_s": self.tokens_per_s_delta[0],
                                   "relative": self.tokens_per_s_delta[1]},
            "common_step": self.common_step,
            "loss_at_common_step": {"a": self.loss_at_common[0], "b": self.loss_at_common[1],
                                    "delta": self.loss_delta},
            "loss_table": [asdict(r) for r in self.loss_rows],
            "held_out_at_common_step": {"step": self.held_out_step, "a": self.held_out_at[0],
                                        "b": self.held_out_at[1], "delta": self.held_out_delta},
        }


def _side(run: dict, p: stats.PassStats) -> Side:
    summary = p.summary(run["config"].get("steps"))
    return Side(run["id"], run.get("name"), run["status"], summary.steps_done,
                summary.steps_total, summary.median_step_s, summary.tokens_per_s,
                summary.last_loss)


def _loss_at(store, run_id: int, step: int | None) -> float | None:
    row = store.step_at(run_id, MAIN, step) if step is not None else None
    return row["loss"] if row else None


def diff_runs(store, a_ref, b_ref) -> Diff:
    """Run B against run A (deltas are B - A), over their main passes.

    From the passes' aggregates (``stats.pass_stats``, ``stats.loss_table_of``):
    two runs of 1,000,000 steps are not read step by step.
    """
    run_a, run_b = store.run(a_ref), store.run(b_ref)
    pa, pb = stats.pass_stats(store, run_a["id"], MAIN), stats.pass_stats(store, run_b["id"], MAIN)
    side_a, side_b = _side(run_a, pa), _side(run_b, pb)
    last_a = pa.step_span[1] if pa.step_span else None
    last_b = pb.step_span[1] if pb.step_span else None

    common = min(last_a, last_b) if last_a is not None and last_b is not None else None
    at_a, at_b = _loss_at(store, run_a["id"], common), _loss_at(store, run_b["id"], common)

    held_a, held_b = output.held_out(store, run_a["id"]), output.held_out(store, run_b["id"])
    both = sorted({p["step"] for p in held_a.points} & {p["step"] for p in held_b.points})
    held_step = both[-1] if both else None
    held_at = ((held_a.at(held_step)["loss"], held_b.at(held_step)["loss"])
               if held_step is not None else (None, None))

    # One set of ranges for both tables, so their rows line up.
    total = max([x for x in (last_a, last_b) if x is not None], default=0)
    rows = []
    if total:
        for ra, rb in zip(stats.loss_table_of(store, run_a["id"], MAIN, total),
                          stats.loss_table_of(store, run_b["id"], MAIN, total)):
            if ra.steps or rb.steps:
                ha, hb = (_loss_of(h.last_in(ra.first, ra.last)) for h in (held_a, held_b))
                rows.append(LossRow(ra.first, ra.last, ra.mean_loss, rb.mean_loss,
                                    _delta(ra.mean_loss, rb.mean_loss)[0], ra.steps, rb.steps,
                                    ha, hb, _delta(ha, hb)[0]))
    return Diff(
        a=side_a, b=side_b, config=config_diff(run_a["config"], run_b["config"]),
        step_s_delta=_delta(side_a.median_step_s, side_b.median_step_s),
        tokens_per_s_delta=_delta(side_a.tokens_per_s, side_b.tokens_per_s),
        common_step=common, loss_at_common=(at_a, at_b), loss_delta=_delta(at_a, at_b)[0],
        loss_rows=tuple(rows),
        held_out_step=held_step, held_out_at=held_at, held_out_delta=_delta(*held_at)[0],
    )


def _loss_of(point: dict | None) -> float | None:
    return point["loss"] if point else None
