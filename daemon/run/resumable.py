"""A queued run that will resume, and the changes its checkpoint can go on with.

A run queued by `rngdctl resume` (or any run whose output folder holds a checkpoint of it)
goes on from its newest checkpoint, and the trainer refuses a checkpoint another config
wrote: every ``RESUME_KEYS`` value (trainer/config.py) must be the one in the checkpoint's
manifest. An `edit` that changes one would cost the run an attempt at launch and fail it
there; ``check_edit`` refuses it first, in one line naming the key. A change back to the
checkpoint's value is always taken, so a run that already failed that way can be edited back.

Torch-free: the manifest is read as JSON (trainer/output/checkpoint.py writes it), from where this
host sees the checkpoint; one it cannot see (a Kubernetes volume not mounted here) is not
checked.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from daemon.errors import BadInput
from daemon.run import output
from daemon.run.spec import baseline_steps
from trainer.config import RESUME_KEYS, TrainConfig
from trainer.ownership import MAX_JSON_BYTES, NotOurs, read_regular

#: A checkpoint's manifest, written last (trainer/output/checkpoint.py's MANIFEST; a test holds them
#: equal).
MANIFEST = "manifest.json"

#: A resume key as `edit --set` names it, where the two differ.
SET_NAMES = {"resident_layers": "resident", "seq_len": "seq-len", "baseline_steps":
             "baseline-steps", "eval_data": "eval-data", "eval_split": "eval-split"}


def trainer_values(config: dict) -> dict:
    """The ``RESUME_KEYS`` values the trainer runs with for a run config: what
    ``spec.trainer_argv`` gives it, on ``TrainConfig``'s defaults (a test holds the two
    equal through the trainer's own parser)."""
    c = config
    with_baseline = bool(c.get("baseline"))
    cfg = TrainConfig(
        model=str(c["model"]), lora=int(c.get("lora") or 0),
        resident_layers=int(c["resident"]),
        backend=",".join([str(c["backend"])] * int(c["cards"])), steps=int(c["steps"]),
        seq_len=int(c["seq_len"]), accum=int(c["accum"]), lr=float(c["lr"]),
        data=str(c["data"]), pack=bool(c.get("pack")), seed=int(c["seed"]),
        baseline=with_baseline,
        baseline_steps=baseline_steps(c) if with_baseline else None,
        interleave=int(c.get("interleave") or 0) if with_baseline else 0,
        eval_data=c.get("eval_data") or None,
        eval_split=float(c["eval_split"]) if c.get("eval_split") else None)
    values = asdict(cfg)
    return {key: values[key] for key in RESUME_KEYS}


def checkpoint_of(store, run: dict) -> tuple[str, dict] | None:
    """The newest checkpoint of ``run`` this host sees, as (its path, its manifest's
    fingerprint); None when there is none, or its manifest is not one of this run's."""
    newest = output.run_output(store, run).newest_checkpoint()
    if newest is None:
        return None
    try:
        manifest = json.loads(read_regular(Path(newest.path) / MANIFEST,
                                           max_bytes=MAX_JSON_BYTES, what="manifest"))
        state = manifest["state"]
        fingerprint, owner = state["fingerprint"], state.get("run_id")
    except (NotOurs, ValueError, KeyError, TypeError):
        return None  # incomplete or not a manifest: the trainer will not resume from it
    if not isinstance(fingerprint, dict) or str(owner) != str(run["id"]):
        return None
    return newest.path, fingerprint


def check_edit(store, run: dict, config: dict, settings: list[str]) -> None:
    """BadInput (one line) when ``config``, a queued run's edited config, changes a resume
    key away from the value its checkpoint was written with."""
    found = checkpoint_of(store, run)
    if found is None:
        return
    path, theirs = found
    try:
        before = trainer_values(run["config"])
    except (KeyError, TypeError, ValueError):  # a config stored before a key existed
        before = {}  # then every key the checkpoint holds is checked
    after = trainer_values(config)  # validated: every key is there
    for key in RESUME_KEYS:
        if after[key] != before.get(key) and key in theirs and after[key] != theirs[key]:
            name = SET_NAMES.get(key, key)
            raise BadInput(
                f"run {run['id']} goes on from {path}, written with {name} {theirs[key]!r}: "
                f"{name} {after[key]!r} would fail there at launch (a checkpoint resumes only "
                f"its own config); keep {name} {theirs[key]!r}, or start a new run with "
                f"`rngdctl clone {run['id']} {' '.join(f'--set {s}' for s in settings)}`")
