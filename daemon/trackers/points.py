"""What a tracker is sent, read from the store: the same for TensorBoard and MLflow.

- per step of each pass: ``train/loss``, ``train/step_s``, ``train/tokens_per_s``,
  ``train/lr`` and ``phase/<phase>`` for each phase the step timed;
- per evaluation: ``eval/loss`` and ``eval/perplexity``;
- the run's config (the submitted one, with what the trainer said it ran) as
  hyperparameters;
- at the end: the step model's error with its 95 % interval (``stepmodel/error``,
  ``stepmodel/interval``, ``stepmodel/model_s``, ``stepmodel/measured_s``, at the main
  pass's last step; ``daemon.stepmodel.for_run``'s comparison, never computed again here),
  how the run ended, and its note.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field

from daemon.store import DONE, FINISHED
from trainer import records

log = logging.getLogger("rngdctl.trackers")

#: Steps read and sent at once, per pass: a send is bounded whatever the run's length.
BATCH_STEPS = 500
#: A hyperparameter's text past this is cut (MLflow's oldest servers take 500 characters).
MAX_PARAM_CHARS = 500


@dataclass(frozen=True)
class Point:
    """One step's (or one evaluation's) values, by tag."""

    step: int
    time: float | None
    values: dict[str, float]


def step_point(row: tuple) -> Point:
    """A ``Store.tracked_steps`` row as a point."""
    step, loss, step_s, tokens, lr, time, *phases = row
    values = {}
    if loss is not None:
        values["train/loss"] = loss
    values["train/step_s"] = step_s
    if step_s > 0:
        values["train/tokens_per_s"] = tokens / step_s
    if lr is not None:
        values["train/lr"] = lr
    for name, seconds in zip(records.PHASES, phases):
        if seconds is not None:
            values[f"phase/{name}"] = seconds
    return Point(step, time, values)


def eval_point(row: dict) -> Point:
    """A ``Store.evals`` row as a point."""
    values = {"eval/loss": row["loss"]} if row["loss"] is not None else {}
    if row["perplexity"] is not None:
        values["eval/perplexity"] = row["perplexity"]
    return Point(row["step"], row["time"], values)


def hyperparameters(store, run: dict) -> dict[str, bool | int | float | str]:
    """The run's config as hyperparameters: numbers, booleans and text as they are, a
    list or a table as its JSON; unset (None) keys left out."""
    from daemon.run.spec import merged_config

    out: dict[str, bool | int | float | str] = {}
    for key, value in sorted(merged_config(run, store.passes(run["id"])).items()):
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            value = str(value)
        elif not isinstance(value, (bool, int, float, str)):
            value = json.dumps(value, sort_keys=True, default=str)
        if isinstance(value, str) and len(value) > MAX_PARAM_CHARS:
            value = value[:MAX_PARAM_CHARS - 1] + "…"
        out[str(key)] = value
    return out


@dataclass(frozen=True)
class Ending:
    """How a run ended, as a tracker is told it once its steps are all sent."""

    status: str
    ended: float
    last_step: int  # the main pass's last step (0: none)
    model: dict[str, float] = field(default_factory=dict)  # the step model's verdict
    note: tuple[str, str] | None = None  # (file name, markdown)

    @property
    def succeeded(self) -> bool:
        return self.status == DONE


def ending(store, run: dict, note=None) -> Ending | None:
    """The run's end (None while it runs): its status, the step model's error and interval,
    and the note that ``note(store, run_id) -> (name, text)`` writes (the CLI's: the daemon
    imports no note code); a step model or a note that fails is left out, said in the log."""
    if run["status"] not in FINISHED or run.get("ended") is None:
        return None
    last = store.last_step(run["id"], records.MAIN)
    return Ending(run["status"], run["ended"], last["step"] if last else 0,
                  _model_verdict(store, run["id"]), _note(store, run["id"], note))


def _model_verdict(store, run_id: int) -> dict[str, float]:
    from daemon import stepmodel
    from daemon.errors import ModelFitError

    try:
        comparison = stepmodel.for_run(store, run_id)
    except ModelFitError:
        return {}
    except Exception:  # the verdict is information: it must never stop the run's end
        log.exception("the step model of run %s", run_id)
        return {}
    if comparison is None:
        return {}
    verdict = {"stepmodel/error": comparison.error, "stepmodel/interval": comparison.interval,
               "stepmodel/model_s": comparison.model_s,
               "stepmodel/measured_s": comparison.measured_s}
    return {k: v for k, v in verdict.items() if math.isfinite(v)}


def _note(store, run_id: int, note) -> tuple[str, str] | None:
    if note is None:
        return None
    try:
        return note(store, run_id)
    except Exception:  # the run's numbers still go; the note's failure is in the log
        log.exception("the note of run %s for the trackers", run_id)
        return None
