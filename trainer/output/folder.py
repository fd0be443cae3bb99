"""The run's output folder, as the recipe uses it: resume, checkpoints, the saved model.

``OutputFolder`` is what trainer/train.py calls between steps; the formats are
trainer/output/checkpoint.py's and trainer/output/save.py's. It also keeps the time spent
outside every step (``phases``: evaluating, checkpointing, saving, resuming),
which the ``end`` record carries, never a step.

A checkpoint resumes only the config that wrote it: ``RESUME_KEYS`` must be
equal (and the model and data files the same bytes), else one line says
which differ. What may change on resume: where the records go, the threads,
how often checkpoints and evaluations come, and the output format.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path

from trainer import datafile, ownership, records
from trainer.config import RESUME_DEFAULTS, RESUME_KEYS
from trainer.engine.timing import interleaved_order
from trainer.errors import Preempted, TrainerError, UsageError
from trainer.output import checkpoint, weights
from trainer.output.checkpoint import Checkpoint, CheckpointError, CheckpointWriteError
from trainer.output.console import log
from trainer.ownership import NotOurs, Owner
from trainer.records import END_PHASES, MAIN, Event


def fingerprint(cfg) -> dict:
    """What must match to resume: the RESUME_KEYS, and the bytes of the files they name."""
    values = asdict(cfg)
    out = {k: values[k] for k in RESUME_KEYS}
    out["files"] = {}
    model_config = Path(cfg.model).expanduser() / "config.json"
    if model_config.is_file():
        out["files"]["model config.json"] = _digest(model_config)
    for key in ("data", "eval_data"):
        digest = _data_digest(values[key], cfg.max_data_bytes, f"--{key.replace('_', '-')}")
        if digest is not None:
            out["files"][key] = digest
    return out


def _digest(path: Path) -> str:
    """The sha256 of one of the user's inputs (a link followed: a hub cache links them)."""
    try:
        return weights.file_digest(path, follow_symlinks=True)
    except NotOurs as exc:
        raise UsageError(str(exc)) from None


def _data_digest(spec: str | None, max_bytes: int, option: str) -> str | None:
    """The sha256 of the data a spec names (a file's, or a datasets folder's files', as the
    encoded data's cache names it); None for synthetic data or a spec that names nothing
    there (the data's reading says why)."""
    from trainer.data import cache

    kind, path = datafile.named(spec) if spec else ("synthetic", None)
    if path is None or not os.path.exists(path):
        return None
    return cache.digest(kind, path, max_bytes=max_bytes, option=option)


def differences(theirs: dict, ours: dict) -> list[str]:
    """``key: X there, Y here`` for each fingerprint entry that differs."""
    out = []
    for key in RESUME_KEYS:
        there = theirs.get(key, RESUME_DEFAULTS.get(key))
        if there != ours.get(key):
            out.append(f"{key}: {there!r} there, {ours.get(key)!r} here")
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

    # === whose folder ========================================================

    @property
    def owner(self) -> Owner:
        """Who this run is: a run of a home (the daemon's), else a trainer started by hand,
        told apart by its config, so running it again with the same options goes on."""
        cfg = self.cfg
        if cfg.home_id is not None:
            return Owner(str(cfg.run_id), cfg.home_id)
        return Owner(cfg.run_id, None, ownership.config_digest(self.fingerprint))

    def claim(self) -> None:
        """Make ``--out`` this run's before any step: refused in one line (UsageError) when
        it cannot be written, is another run's or inside one, or holds files no run
        claims; a resume finds its own claim there. Nothing is written on a refusal."""
        if self.out is None:
            return
        why = ownership.writable_ancestor(self.out)
        if why is not None:
            raise UsageError(f"--out {self.out}: {why}")
        owner = self.owner
        hand = {"config": self.fingerprint} if owner.home_id is None else {}
        try:
            ownership.check_output(self.out, owner)
        except NotOurs as exc:
            if not self._unused_hand_claim():
                raise UsageError(self._refusal(exc)) from None
            # A trainer started by hand that stopped before it wrote anything (bad
            # options): nothing there to lose, so the corrected run may have it.
            ownership.write_info(self.out, {**hand, "owner": owner.as_dict(),
                                            "claimed": time.time(), "files": {}},
                                 mode=ownership.file_mode(self.cfg.output_mode))
        try:
            ownership.claim(self.out, owner, mode=self.cfg.output_mode, details=hand)
        except OSError as exc:
            raise UsageError(f"--out {self.out}: cannot be written: "
                             f"{exc.strerror or exc}") from None

    def _unused_hand_claim(self) -> bool:
        """``--out`` holds nothing but the claim of a trainer started by hand, naming no
        file, and this trainer was started by hand too."""
        if self.owner.home_id is not None or ownership.claimed_ancestor(self.out) is not None:
            return False
        try:
            ownership.check_private(self.out, "output folder")
            names = {p.name for p in self.out.iterdir()}
            info = ownership.read_info(self.out / ownership.CLAIM_NAME)
        except (OSError, NotOurs):
            return False
        theirs = ownership.owner_of(info)
        return (names == {ownership.CLAIM_NAME} and theirs.home_id is None
                and theirs.run_id == self.owner.run_id and info.get("files") == {})

    def _refusal(self, exc: NotOurs) -> str:
        """The refusal's line; for a hand-started trainer's own folder run with other
        options, what differs (its claim keeps the config)."""
        owner = self.owner
        try:
            info = ownership.read_info(self.out / ownership.CLAIM_NAME)
        except NotOurs:
            return str(exc)
        theirs = ownership.owner_of(info)
        if owner.home_id is not None or theirs.home_id is not None \
                or theirs.run_id != owner.run_id or not isinstance(info.get("config"), dict):
            return str(exc)
        differ = differences(info["config"], self.fingerprint)
        return (f"--out {self.out} holds the output of a trainer started by hand with another "
                f"config ({'; '.join(differ) or 'other options'}): run with the same options "
                f"to go on, or give another --out")

    # === resume ==============================================================

    def find_resume(self, plan: list[tuple[str, int, int]]) -> Checkpoint | None:
        """The checkpoint to go on from (verified, this run's own unless --resume-foreign,
        of this config, its passes ``plan``'s (label, resident, steps)), or None."""
        if self.out is None:
            return None
        t0 = time.perf_counter()
        if self.cfg.resume == "auto":
            found = checkpoint.newest(self.out, self.owner, on_bad=self._passed_over,
                                      accept=lambda ckpt: self._check(ckpt, plan))
        else:
            found = self._given(plan)
        if found is None:
            return None
        self.newest = found.path
        self._resumed = found
        self._resume_started = t0
        return found

    def _given(self, plan) -> Checkpoint:
        """--resume PATH: the checkpoint there; another run's only with --resume-foreign."""
        found = checkpoint.verify(Path(os.path.realpath(Path(self.cfg.resume).expanduser())))
        why = checkpoint.foreign(found.path, found.owner, self.owner)
        if why is not None and not self.cfg.resume_foreign:
            raise checkpoint.ForeignCheckpoint(f"{why}: --resume-foreign to go on from it")
        self._check(found, plan)
        return found

    def _check(self, ckpt: Checkpoint, plan) -> None:
        """What a checkpoint must be to resume this run, beyond its own form: written by
        this config, with this run's passes, and every file it lists holding exactly the
        tensors this model's engine keeps: checked before any engine is built, so that
        ``auto`` can still pass it over."""
        differ = differences(ckpt.state["fingerprint"], self.fingerprint)
        if differ:
            raise CheckpointError(f"{ckpt.path}: written by another config ({'; '.join(differ)})"
                                  f": resume with the same options, or give another --out")
        self._check_passes(ckpt, plan)
        expected = self.recipe.expected_layout()
        for file in ckpt.manifest["files"]:
            checkpoint.check_layout(ckpt, file, expected)

    def _check_passes(self, ckpt: Checkpoint, plan) -> None:
        """The checkpoint's passes are the run's (label, steps), at a point of their
        interleaved order when they interleave."""
        where = ckpt.path / checkpoint.MANIFEST
        saved = ckpt.state["passes"]
        labels = [label for label, _, _ in plan]
        if sorted(saved) != sorted(labels):
            raise CheckpointError(f"{where}: has the passes {sorted(saved)}, this run "
                                  f"{sorted(labels)}")
        for label, _, steps in plan:
            if saved[label]["steps"] != steps:
                raise CheckpointError(f"{where}: has no {label} pass of {steps} steps")
        if self.cfg.baseline and self.cfg.interleave:
            order = interleaved_order([steps for _, _, steps in plan], self.cfg.interleave)
            done = [saved[label]["steps_done"] for label in labels]
            if [order[:sum(done)].count(i) for i in range(len(plan))] != done:
                raise CheckpointError(f"{where}: its passes' steps are not a point of the "
                                      f"interleaved order (another --interleave)")

    def _passed_over(self, path: Path, why: str) -> None:
        self.recipe.writer.write(Event(records.CHECKPOINT_BAD, f"passed over: {why}",
                                       data={"path": str(path), "error": why}))

    def position(self, ckpt: Checkpoint, passes) -> None:
        """Each pass's steps done and losses so far, and its start config, from ``ckpt``
        (whose passes ``find_resume`` checked)."""
        saved = ckpt.state["passes"]
        for p in passes:
            p.summary.losses = [float(x) for x in saved[p.label]["losses"]]
            p.config = saved[p.label]["config"]

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
        others = ", ".join(f"{label} at step {n}" for label, n in position.items() if label != MAIN)
        log(f"resumed from step {ckpt.step}, {ckpt.path}" + (f" ({others})" if others else ""))
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
                                          self.cfg.keep_checkpoints, owner=self.owner)
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
        from trainer.output import save
        from trainer.output.provenance import versions

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
            saved = save.save(self.out, main.engine.model, info=info, owner=self.owner,
                              mode=cfg.output_mode, tokenizer=recipe.tokenizer,
                              merge=cfg.merge, base_folder=recipe.spec.folder)
        except OSError as exc:  # a full disk: the run's steps are kept in its checkpoint
            self.phases["save_s"] += time.perf_counter() - t0
            raise TrainerError(f"the model was not saved to {self.out}: "
                               f"{exc.strerror or exc} ({exc.filename or self.out})"
                               f"{self._kept('free space')}") from None
        except NotOurs as exc:  # a file put there since the claim: never replaced
            self.phases["save_s"] += time.perf_counter() - t0
            raise TrainerError(f"the model was not saved: {exc}"
                               f"{self._kept('move it away')}") from None
        self.phases["save_s"] += saved.seconds
        self.model_dir = saved.path
        log(f"saved the {saved.format} model to {saved.path} ({saved.bytes / 1e6:.1f} MB)")
        recipe.writer.write(Event(
            records.SAVED, f"{saved.format} model in {saved.path} ({saved.bytes / 1e6:.1f} MB "
                           f"in {saved.seconds:.2f} s)",
            config_label=MAIN, data={"path": str(saved.path), "format": saved.format,
                                     "files": saved.files, "bytes": saved.bytes,
                                     "seconds": round(saved.seconds, 3)}))

    def _kept(self, fix: str) -> str:
        return f"; {self.newest} is kept: {fix} and resume from it" if self.newest else ""

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
