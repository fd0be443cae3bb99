"""What a run's output is, read from the store: its model folder, its checkpoints, its
resumes and its held-out loss (issue 26).

``show``, the TUI, the note and ``diff`` all read it from here; none derives it again.

- The model folder: the newest ``saved`` event's path and format; before one, the folder
  the run was given (``spec.output_dir`` under the home's runs folder), not yet
  written, in the format its config will write. A written folder is checked before
  it is named (``state``): its ``rngdctl.json`` must name this run of this home as
  its owner and the weights' sha256 the ``saved`` event recorded; else it is
  ``missing`` or ``overwritten`` (with the writer's run id), and no load line is
  given for it. The sha256 maps are compared, not the weights hashed again: that
  reads every byte (an 8B model's 32 GB at each ``show``), and a file changed
  outside rngdctl.json is no run's write.
- The checkpoints: each ``checkpoint`` event's path and step, and whether that folder is
  still on disk where this host can see it (``--keep-checkpoints`` deletes old ones; a
  Kubernetes volume may not be mounted here).
- The resumes: each ``resume`` event, the step it went on from, and the steps it trained
  again: the pass's steps stored past the checkpoint's step with a time before the
  resume's (the store kept their first copy; ``Store.steps_redone``).
- The held-out loss: the main pass's eval records, the last and the lowest.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from daemon.run.spec import KNOWN_MODELS, output_dir
from trainer import ownership, records

#: What a ``saved`` event's ``format`` says the folder holds.
FULL, PEFT, MERGED = "full", "peft", "merged"
FORMAT_WORDS = {FULL: "full weights", PEFT: "PEFT adapter", MERGED: "merged full weights"}

#: The file a PEFT adapter names its base model in (PEFT's own).
ADAPTER_CONFIG = "adapter_config.json"
#: Where the trainer writes a named model's untrained base, inside the adapter's folder.
NAMED_BASE = "base"
#: Where the store lives in its home (``daemon.home.DB_NAME``): the home's runs folder is
#: beside it.
RUNS = "runs"
#: A written model folder as found now: this run's, gone (or unreadable), or another's.
OK, MISSING, OVERWRITTEN = "ok", "missing", "overwritten"
#: An adapter's config larger than this is not PEFT's.
ADAPTER_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class ModelFolder:
    """The run's model folder: where it is, whether the trainer wrote it, and what it holds."""

    path: str
    written: bool  # a ``saved`` event says the trainer wrote it
    format: str  # FULL, PEFT or MERGED: as saved, else as the run's config will save
    base: str | None = None  # the base model a PEFT adapter loads onto
    bytes: int | None = None
    on_disk: bool = False  # seen from this host now
    state: str | None = None  # written: OK, MISSING or OVERWRITTEN; None before a save
    writer: str | None = None  # OVERWRITTEN: the run id its rngdctl.json names, if any
    detail: str | None = None  # MISSING, OVERWRITTEN: what was found, in words

    @property
    def ours(self) -> bool:
        """Written by this run and still as it saved it: the only model a load line names."""
        return self.written and self.state == OK

    def load_line(self) -> str:
        """One line of Python that loads it."""
        return load_line(self.format, self.path, self.base)


@dataclass(frozen=True)
class Checkpoint:
    path: str
    step: int | None  # the main pass's steps when it was written
    time: float
    on_disk: bool  # still there, seen from this host


@dataclass(frozen=True)
class Resume:
    """A process that went on from a checkpoint, and what that cost again."""

    time: float
    path: str | None
    from_step: int | None  # the main pass's step of the checkpoint
    steps_redone: int | None  # the main pass's steps trained a second time
    redone_by_pass: dict  # {pass label: steps trained again}, each pass the checkpoint held
    seconds: float | None  # reading and checking the checkpoint


@dataclass(frozen=True)
class RunOutput:
    model: ModelFolder
    checkpoints: tuple[Checkpoint, ...] = ()
    resumes: tuple[Resume, ...] = ()

    @property
    def steps_redone(self) -> int:
        return sum(r.steps_redone or 0 for r in self.resumes)

    def newest_checkpoint(self) -> Checkpoint | None:
        on_disk = [c for c in self.checkpoints if c.on_disk]
        return on_disk[-1] if on_disk else None

    def as_dict(self) -> dict:
        """``show --json``'s ``output`` and ``resumes``."""
        return {
            "output": {"model_dir": self.model.path, "written": self.model.written,
                       "format": self.model.format, "base_model": self.model.base,
                       "bytes": self.model.bytes, "on_disk": self.model.on_disk,
                       "state": self.model.state, "writer": self.model.writer,
                       "state_detail": self.model.detail,
                       "load": self.model.load_line() if self.model.ours
                       or not self.model.written else None,
                       "checkpoints": [asdict(c) for c in self.checkpoints]},
            "resumes": {"count": len(self.resumes), "steps_redone": self.steps_redone,
                        "each": [asdict(r) for r in self.resumes]},
        }


@dataclass(frozen=True)
class HeldOut:
    """A pass's held-out loss: every eval in step order, the last and the lowest."""

    label: str = records.MAIN
    points: tuple[dict, ...] = ()
    best: dict | None = None

    @property
    def last(self) -> dict | None:
        return self.points[-1] if self.points else None

    def at(self, step: int) -> dict | None:
        """The eval at ``step``, or None."""
        return next((p for p in self.points if p["step"] == step), None)

    def last_in(self, first: int, last: int) -> dict | None:
        """The newest eval with a step in ``first..last`` (a loss table's range), or None."""
        inside = [p for p in self.points if first <= p["step"] <= last]
        return inside[-1] if inside else None

    def as_dict(self) -> dict | None:
        """``show --json``'s ``evals``; None for a pass without any."""
        if not self.points:
            return None
        return {"pass": self.label, "count": len(self.points), "last": self.last,
                "best": self.best, "points": list(self.points)}


# === Reading it ==============================================================


def runs_dir_of(store) -> Path:
    """The home's runs folder: the store is ``HOME/rngdctl.db`` (``daemon.home``)."""
    return Path(store.path).parent / RUNS


def configured_format(config: dict) -> str:
    """What the trainer will write for this config: ``--lora`` an adapter, with ``--merge``
    merged weights, else full weights."""
    if config.get("lora"):
        return MERGED if config.get("merge") else PEFT
    return FULL


def run_output(store, run: dict, runs_dir: Path | None = None) -> RunOutput:
    """The run's output folder, checkpoints and resumes, from its events (``run``: a stored
    run, as ``Store.run`` gives it)."""
    events = store.events(run_id=run["id"], kinds=(records.SAVED, records.CHECKPOINT,
                                                   records.RESUME))
    return RunOutput(
        model=_model_folder(run, [e for e in events if e["kind"] == records.SAVED],
                            runs_dir or runs_dir_of(store), store.home_id),
        checkpoints=_checkpoints([e for e in events if e["kind"] == records.CHECKPOINT]),
        resumes=tuple(_resume(store, run["id"], e) for e in events
                      if e["kind"] == records.RESUME),
    )


def held_out(store, run_id: int, label: str = records.MAIN) -> HeldOut:
    """The pass's held-out loss series."""
    points = tuple(store.evals(run_id, label))
    return HeldOut(label, points, store.best_eval(run_id, label) if points else None)


def _data(event: dict) -> dict:
    data = event.get("data")
    return data if isinstance(data, dict) else {}


def _int_or_none(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number_or_none(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None


def _model_folder(run: dict, saved: list[dict], runs_dir: Path, home_id: str) -> ModelFolder:
    config = run.get("config") or {}
    newest = next((_data(e) for e in reversed(saved) if isinstance(_data(e).get("path"), str)),
                  None)
    if newest is None:
        path = str(output_dir(run, runs_dir))
        fmt = configured_format(config)
        return ModelFolder(path, False, fmt, _base(fmt, path, {}, config), None,
                           Path(path).is_dir())
    path = newest["path"]
    fmt = newest.get("format") if newest.get("format") in FORMAT_WORDS else \
        configured_format(config)
    state, writer, detail = _state(Path(path), run["id"], home_id, newest.get("files"))
    return ModelFolder(path, True, fmt, _base(fmt, path, newest, config),
                       _int_or_none(newest.get("bytes")), Path(path).is_dir(), state, writer,
                       detail)


def _state(folder: Path, run_id: int, home_id: str, files) -> tuple[str, str | None, str | None]:
    """(state, writer, detail) of a folder the run saved to: its ``rngdctl.json`` (read as a
    planted file may be: ``ownership.read_info``) must name this run of this home, and
    the sha256 of each weights file the ``saved`` event recorded."""
    if not folder.is_dir():
        return MISSING, None, "not found from this host"
    try:
        info = ownership.read_info(folder / ownership.CLAIM_NAME)
    except ownership.NotOurs as exc:
        gone = not (folder / ownership.CLAIM_NAME).exists()
        return MISSING, None, (f"its {ownership.CLAIM_NAME} is gone" if gone
                               else f"its {ownership.CLAIM_NAME} is not rngdctl's ({exc})")
    owner = ownership.owner_of(info)
    if "owner" in info:
        mine = (owner.run_id, owner.home_id) == (str(run_id), home_id)
    else:  # saved before folders were claimed: the run id alone
        mine = owner.run_id == str(run_id)
    if not mine:
        if owner.home_id == home_id:
            who = f"run {owner.run_id} of this home"
        elif owner.home_id is None and "owner" in info:
            who = "a trainer started by hand" + (f" (run id {owner.run_id})" if owner.run_id
                                                  else "")
        else:
            who = f"run {owner.run_id} of another home" + (f" ({owner.home_id})"
                                                           if owner.home_id else "")
        return OVERWRITTEN, owner.run_id, f"{who} wrote over it"
    if isinstance(files, dict) and info.get("files") != files:
        what = ("names no weights file (a save in progress, or one that stopped)"
                if not info.get("files") else "names other weights than this run saved")
        return OVERWRITTEN, owner.run_id, f"its {ownership.CLAIM_NAME} {what}"
    return OK, None, None


def _base(fmt: str, path: str, saved: dict, config: dict) -> str | None:
    """The base model a PEFT adapter loads onto: the ``saved`` event's ``base`` when it
    names one, else what the adapter's own ``adapter_config.json`` names (a folder inside
    the adapter's, such as ``base``, read from there), else the run's ``--model``: a
    folder, or for a named model (tiny-llama, ...) ``DIR/base``, where the trainer writes
    its untrained base, since it exists nowhere else."""
    if fmt != PEFT:
        return None
    if isinstance(saved.get("base"), str):
        return saved["base"]
    folder = Path(path)
    try:
        named = json.loads(ownership.read_regular(folder / ADAPTER_CONFIG,
                                                  max_bytes=ADAPTER_CONFIG_BYTES)).get(
            "base_model_name_or_path")
    except (ownership.NotOurs, ValueError, AttributeError):
        named = None
    if isinstance(named, str) and named:
        inside = folder / named
        return str(inside) if not Path(named).is_absolute() and inside.is_dir() else named
    model = config.get("model")
    if model in KNOWN_MODELS:
        return str(folder / NAMED_BASE)
    return str(model) if model else None


def _checkpoints(events: list[dict]) -> tuple[Checkpoint, ...]:
    """One per folder, the newest write of each (a folder written again after a resume
    from an older checkpoint is one checkpoint), oldest first."""
    newest: dict[str, Checkpoint] = {}
    for e in events:
        data = _data(e)
        if isinstance(data.get("path"), str):
            newest.pop(data["path"], None)
            newest[data["path"]] = Checkpoint(data["path"], _int_or_none(data.get("step")),
                                              e["time"], Path(data["path"]).is_dir())
    return tuple(newest.values())


def _resume(store, run_id: int, event: dict) -> Resume:
    data = _data(event)
    from_step = _int_or_none(data.get("step"))
    position = data.get("position") if isinstance(data.get("position"), dict) else {}
    done = {label: n for label, n in position.items() if _int_or_none(n) is not None}
    if from_step is not None:
        done.setdefault(records.MAIN, from_step)
    redone = {label: store.steps_redone(run_id, label, n, event["time"])
              for label, n in done.items()}
    return Resume(event["time"], data.get("path") if isinstance(data.get("path"), str) else None,
                  from_step, redone.get(records.MAIN) if from_step is not None else None,
                  redone, _number_or_none(data.get("seconds")))


# === Words ===================================================================


def load_line(fmt: str, path: str, base: str | None = None) -> str:
    """One line of Python that loads a model folder: transformers for full or merged
    weights, PEFT onto its base model for an adapter."""
    auto = "from transformers import AutoModelForCausalLM; "
    if fmt == PEFT:
        return (f"from peft import PeftModel; {auto}model = PeftModel.from_pretrained("
                f"AutoModelForCausalLM.from_pretrained({base or 'BASE'!r}), {path!r})")
    return f"{auto}model = AutoModelForCausalLM.from_pretrained({path!r})"


def resume_words(resume: Resume) -> str:
    """'from step 50, 20 steps again' (and a baseline pass's steps when it had some)."""
    where = f"from step {resume.from_step}" if resume.from_step is not None else \
        "from a checkpoint of unknown step"
    again = resume.steps_redone
    words = where + (f", {again} step{'' if again == 1 else 's'} again" if again is not None
                     else "")
    others = {k: n for k, n in resume.redone_by_pass.items() if k != records.MAIN and n}
    if others:
        words += " (and " + ", ".join(f"{n} of the {k} pass" for k, n in others.items()) + ")"
    return words


def resumes_words(output: RunOutput) -> str | None:
    """'resumed 2 times: from step 50, 20 steps again; from step 100, 7 steps again', or
    None for a run that never resumed."""
    if not output.resumes:
        return None
    n = len(output.resumes)
    return (f"resumed {'once' if n == 1 else f'{n} times'}: "
            + "; ".join(resume_words(r) for r in output.resumes))


def size_words(n: int | None) -> str | None:
    """Bytes as '1.2 GB', '340 MB', '12 kB' (powers of 1000, as file managers print)."""
    if n is None:
        return None
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n} B"


def model_words(output: RunOutput, *, finished: bool) -> str:
    """'/runs/3/model (full weights, 1.2 GB)', or '... (full weights, not written yet)'."""
    model = output.model
    parts = [FORMAT_WORDS.get(model.format, model.format)]
    if model.written:
        if model.bytes is not None:
            parts.append(size_words(model.bytes))
        if not model.on_disk:
            parts.append("not found from this host")
        elif not model.ours:
            parts.append(state_words(model))
    else:
        parts.append("not written" if finished else "not written yet")
    return f"{model.path} ({', '.join(parts)})"


def state_words(model: ModelFolder) -> str:
    """Why a written folder is not named as this run's model: 'overwritten: run 5 of this
    home wrote over it; not this run's model'."""
    if model.state == MISSING:
        return f"{model.detail}: it cannot be checked as this run's model"
    return f"{model.state}: {model.detail}; not this run's model"


def checkpoints_words(output: RunOutput) -> str | None:
    """'2 on disk of 4 written, newest step 150: /…/step-150', or None when none was."""
    if not output.checkpoints:
        return None
    written = len(output.checkpoints)
    on_disk = sum(c.on_disk for c in output.checkpoints)
    newest = output.newest_checkpoint()
    words = f"{on_disk} on disk of {written} written"
    if newest is not None:
        words += f", newest step {newest.step if newest.step is not None else '?'}: " \
                 f"{newest.path}"
    return words


def eval_words(point: dict) -> str:
    """'1.2345 (perplexity 3.44) at step 200'."""
    loss, ppl = point["loss"], point["perplexity"]
    loss_text = f"{loss:.4f}" if loss is not None and math.isfinite(loss) else str(loss)
    ppl_text = f"{ppl:.4g}" if ppl is not None and math.isfinite(ppl) else str(ppl)
    return f"{loss_text} (perplexity {ppl_text}) at step {point['step']}"


def held_out_words(held: HeldOut) -> str | None:
    """'last 1.2345 (perplexity 3.44) at step 200, lowest 1.2000 (...) at step 150, 5
    evaluations', or None for a pass without any."""
    if held.last is None:
        return None
    words = f"last {eval_words(held.last)}"
    if held.best is not None and held.best["step"] != held.last["step"]:
        words += f", lowest {eval_words(held.best)}"
    n = len(held.points)
    return words + f", {n} evaluation{'' if n == 1 else 's'}"
