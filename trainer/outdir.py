"""The run's output folder, as the recipe uses it: resume, checkpoints, the saved model.

``OutputFolder`` is what trainer/train.py calls between steps; the formats are
trainer/checkpoint.py's and trainer/save.py's. It also keeps the time spent
outside every step (``phases``: evaluating, checkpointing, saving, resuming),
which the ``end`` record carries, never a step.

A checkpoint resumes only the config that wrote it: ``RESUME_KEYS`` must be
equal (and the model and data files the same bytes), else one line says
which differ. What may change on resume: where the records go, the threads,
how often checkpoints and evaluations come, and the output format.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from trainer import checkpoint, records, weights
from trainer.checkpoint import Checkpoint, CheckpointError, CheckpointWriteError
from trainer.errors import Preempted, TrainerError
from trainer.records import END_PHASES, MAIN, Event

#: TrainConfig fields a resumed run must share with the checkpoint it goes on from.
RESUME_KEYS = ("model", "lora", "resident_layers", "backend", "steps", "seq_len", "accum",
               "micro_batch", "lr", "schedule", "warmup", "weight_decay", "max_grad_norm",
               "data", "seed", "checkpoint", "baseline", "baseline_steps", "interleave",
               "eval_data", "eval_split")


def fingerprint(cfg) -> dict:
    """What must match to resume: the RESUME_KEYS, and the bytes of the files they name."""
    values = asdict(cfg)
    out = {k: values[k] for k in RESUME_KEYS}
    out["files"] = {}
    model_config = Path(cfg.model).expanduser() / "config.json"
    if model_config.is_file():
        out["files"]["model config.json"] = weights.file_digest(model_config)
    for key in ("data", "eval_data"):
        path = _data_path(values[key])
        if path is not None and path.is_file():
            out["files"][key] = weights.file_digest(path)
    return out


def _data_path(spec: str | None) -> Path | None:
    if not spec or spec == "synthetic":
        return None
    return Path(spec.split(":", 1)[1] if spec.startswith(("nsmc:", "jsonl:")) else spec)


def differences(theirs: dict, ours: dict) -> list[str]:
    """``key: X there, Y here`` for each fingerprint entry that differs."""
    out = []
    for key in RESUME_KEYS:
        if theirs.get(key) != ours.get(key):
            out.append(f"{key}: {theirs.get(key)!r} there, {ours.get(key)!r} here")
    for name in sorted(set(theirs.get("files", {})) | set(ours.get("files", {}))):
        if theirs.get("files", {}).get(name) != ours.get("files", {}).get(name):
            out.append(f"{name}: other bytes")
    return out


class OutputFolder:
    def __init__(self, recipe):
        self.recipe = recipe
        self.cfg = recipe.cfg
        self.out = Path(self.cfg.out) if self.cfg.out else None
        self.phases = dict.fromkeys(END_PHASES, 0.0)
        self.newest: Path | None = None  # the newest complete checkpoint
        self.model_dir: Path | None = None
        self._written_at: int | None = None  # the order of the last checkpoint written
        self._resumed: Checkpoint | None = None
        self._resume_started = 0.0
        self._fingerprint = None

    @property
    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.cfg)
        return self._fingerprint

    # === resume ==============================================================

    def find_resume(self) -> Checkpoint | None:
        """The checkpoint to go on from (verified, and of this config), or None."""
        if self.out is None:
            return None
        t0 = time.perf_counter()
        if self.cfg.resume == "auto":
            found = checkpoint.newest(self.out, on_bad=self._passed_over)
        else:
            found = checkpoint.verify(Path(self.cfg.resume).expanduser())
        if found is None:
            return None
        differ = differences(found.state["fingerprint"], self.fingerprint)
        if differ:
            raise CheckpointError(f"{found.path}: written by another config ({'; '.join(differ)})"
                                  f": resume with the same options, or give another --out")
        self.newest = found.path
        self._resumed = found
        self._resume_started = t0
        return found

    def _passed_over(self, path: Path, why: str) -> None:
        self.recipe.writer.write(Event(records.CHECKPOINT_BAD, f"passed over: {why}",
                                       data={"path": str(path), "error": why}))

    def position(self, ckpt: Checkpoint, passes) -> None:
        """Each pass's steps done and losses so far, and its start config, from ``ckpt``."""
        saved = ckpt.state["passes"]
        for p in passes:
            mine = saved.get(p.label)
            if mine is None or mine["steps"] != p.steps:
                raise CheckpointError(f"{ckpt.path / checkpoint.MANIFEST}: has no {p.label} pass "
                                      f"of {p.steps} steps")
            p.summary.losses = [float(x) for x in mine["losses"]]
            p.config = mine["config"]

    def load_engine(self, ckpt: Checkpoint, p) -> None:
        """A resumed pass's masters and AdamW state into its freshly built engine."""
        file = f"{p.label}.safetensors"
        checkpoint.check_layout(ckpt, file, p.engine.state_layout(moments=True))
        with ckpt.tensors(file) as fetch:
            p.engine.load_state(fetch, moments=True)

    def started(self, ckpt: Checkpoint | None, passes) -> None:
        """The resumed passes are built: the random state as it was, and a ``resume`` event.

        Once per process: a pass built later (main after the baseline) starts
        afresh, as it would have without the stop.
        """
        if ckpt is None or ckpt is not self._resumed:
            return
        self._resumed = None
        checkpoint.restore_rng(ckpt)
        seconds = time.perf_counter() - self._resume_started
        self.phases["resume_s"] += seconds
        self._written_at = checkpoint.order_of(ckpt.state)
        position = ckpt.position
        self.recipe.label = None
        self.recipe.writer.write(Event(
            records.RESUME, f"resumed from {ckpt.path.name}: "
            + ", ".join(f"{label} at step {n}" for label, n in position.items())
            + f" ({seconds:.2f} s from start)",
            data={"path": str(ckpt.path), "step": ckpt.step, "position": position,
                  "seconds": round(seconds, 3)}))

    # === checkpoints =========================================================

    def state(self, passes) -> dict:
        return {
            "run_id": self.cfg.run_id,
            "fingerprint": self.fingerprint,
            "step": _main(passes).steps_done,
            "passes": {p.label: {"steps": p.steps, "steps_done": p.steps_done,
                                 "resident": p.resident, "config": p.config,
                                 "losses": p.summary.losses} for p in passes},
        }

    def checkpoint(self, passes) -> Path | None:
        """Write a checkpoint of the passes now; None when it could not be written (then
        ``--on-checkpoint-error`` says whether the run goes on)."""
        state = self.state(passes)
        order = checkpoint.order_of(state)
        if order == self._written_at:
            return self.newest  # nothing has run since the last one
        name = f"{checkpoint.PREFIX}{state['step']}"
        # A finished baseline is not needed again; the main pass is, for the model it saves.
        files = {f"{p.label}.safetensors": p.engine.state_tensors()
                 for p in passes if p.engine is not None and (p.label == MAIN or not p.done)}
        t0 = time.perf_counter()
        try:
            path, size = checkpoint.write(self.out, name, files, state,
                                          self.cfg.keep_checkpoints)
        except CheckpointWriteError as exc:
            self.phases["checkpoint_s"] += time.perf_counter() - t0
            action = self.cfg.on_checkpoint_error
            self.recipe.writer.write(Event(records.CHECKPOINT_FAILED, str(exc), data={
                "path": str(checkpoint.root(self.out) / name), "step": state["step"],
                "error": str(exc), "action": action}))
            if action == "stop":
                raise TrainerError(str(exc)) from None
            return None
        seconds = time.perf_counter() - t0
        self.phases["checkpoint_s"] += seconds
        self.newest, self._written_at = path, order
        position = {label: p["steps_done"] for label, p in state["passes"].items()}
        self.recipe.writer.write(Event(
            records.CHECKPOINT, f"{name}: {size / 1e6:.1f} MB in {seconds:.2f} s",
            data={"path": str(path), "step": state["step"], "position": position,
                  "bytes": size, "seconds": round(seconds, 3)}))
        return path

    def preempt(self, passes, during: str | None = None) -> Preempted:
        """SIGTERM after a whole step (or ``during`` an evaluation): a checkpoint of now
        (when a pass has moved since the last one), then the Preempted the trainer ends with."""
        path = self.checkpoint(passes) if passes else self.newest
        where = (f"during {during}" if during
                 else f"after main step {_main(passes).steps_done}" if passes
                 else "before the first step")
        if path is None:
            return Preempted(f"stopped by SIGTERM {where}; no checkpoint to resume from",
                             None)
        return Preempted(f"stopped by SIGTERM {where}; resume from {path}", str(path))

    # === the model ===========================================================

    def save(self, main) -> None:
        """The main pass's model to ``--out`` (nothing without it)."""
        if self.out is None:
            return
        from trainer import save
        from trainer.provenance import versions

        if main.engine is None:  # resumed from a checkpoint of its last step
            ckpt = self._resumed or _checkpoint_of(self.newest)
            main.begin(ckpt)
            self.started(ckpt, [main])
        cfg, recipe = self.cfg, self.recipe
        recipe.label = MAIN
        info = {"run_id": cfg.run_id, "step": main.steps_done, "model": cfg.model,
                "data": cfg.data, "seed": cfg.seed, "lora": cfg.lora or None,
                "config": self.fingerprint, "versions": versions(), "time": time.time()}
        t0 = time.perf_counter()
        try:
            saved = save.save(self.out, main.engine.model, info=info, tokenizer=recipe.tokenizer,
                              merge=cfg.merge, base_folder=recipe.spec.folder)
        except OSError as exc:  # a full disk: the run's steps are kept in its checkpoint
            self.phases["save_s"] += time.perf_counter() - t0
            kept = (f"; {self.newest} is kept: free space and resume from it" if self.newest
                    else "")
            raise TrainerError(f"the model was not saved to {self.out}: "
                               f"{exc.strerror or exc} ({exc.filename or self.out}){kept}"
                               ) from None
        self.phases["save_s"] += saved.seconds
        self.model_dir = saved.path
        recipe.writer.write(Event(
            records.SAVED, f"{saved.format} model in {saved.path} ({saved.bytes / 1e6:.1f} MB "
                           f"in {saved.seconds:.2f} s)",
            config_label=MAIN, data={"path": str(saved.path), "format": saved.format,
                                     "files": saved.files, "bytes": saved.bytes,
                                     "seconds": round(saved.seconds, 3)}))

    def end_data(self) -> dict:
        """What the ``end`` record says of the output, beside the steps."""
        data = {"phases": {k: round(v, 6) for k, v in self.phases.items()}}
        if self.model_dir is not None:
            data["model_dir"] = str(self.model_dir)
        if self.newest is not None:
            data["checkpoint"] = str(self.newest)
        return data


def _main(passes):
    return next(p for p in passes if p.label == MAIN)


def _checkpoint_of(path: Path | None) -> Checkpoint | None:
    return checkpoint.verify(path) if path is not None else None
