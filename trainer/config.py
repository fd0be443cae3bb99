"""The trainer's configuration: every option of ``python -m trainer train``, checked.

``TrainConfig`` is what the CLI fills in and the recipe (trainer/train.py)
runs; ``validate`` refuses what cannot run, before any record is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.datafile import MAX_DATA_BYTES
from trainer.errors import UsageError
from trainer.ownership import parse_mode, unusable_output

#: Held-out examples evaluated at most (``--eval-max-examples``); past it, a seeded draw of
#: this many (trainer/data/batches.py ``eval_rows``). The mean's standard error is then about a
#: thirtieth of one example's spread, and an evaluation costs at most this many rows of
#: forward: a 17 MB held-out file (175,000 examples), evaluated whole, once took 76 s
#: before the first step.
MAX_EVAL_EXAMPLES = 1000

#: The baseline pass's steps when --baseline-steps is not given, never more than
#: --steps: up to BASELINE_STEPS when the passes run one after the other (cards), up to
#: INTERLEAVED_BASELINE_STEPS when they interleave (cpu). The model is checked on the
#: medians of steps 6-N of both passes; at the old 10 steps that was 5 steps each, and the
#: error a user saw was mostly the host's noise (tiny-llama on a quiet host: worst 20.6 %).
#: Interleaved, the comparison covers only the steps that ran beside the baseline, so a
#: baseline as long as the run checks the model on all of them for the cost of one more
#: pass on the host (docs/design.md "Timing the two passes"; measured in
#: experiments/2026-12-01-stepmodel-windows-stop-15.md). ``submit`` (daemon/run/spec.py)
#: takes the same rule from here.
BASELINE_STEPS, INTERLEAVED_BASELINE_STEPS = 40, 200


#: TrainConfig fields a resumed run must share with the checkpoint it goes on from
#: (trainer/output/folder.py refuses another config's checkpoint). Here, torch-free, so that the
#: daemon's `edit` checks a run that will resume against the same list (daemon/run/resumable.py).
RESUME_KEYS = ("model", "lora", "resident_layers", "backend", "steps", "seq_len", "accum",
               "micro_batch", "lr", "schedule", "warmup", "weight_decay", "max_grad_norm",
               "data", "seed", "checkpoint", "baseline", "baseline_steps", "interleave",
               "eval_data", "eval_split", "pack")
#: What a checkpoint written before a resume key existed ran with: its fingerprint lacks the
#: key, and only this value is taken as the same.
RESUME_DEFAULTS = {"pack": False}


def default_baseline_steps(steps: int, interleave: int) -> int:
    """The baseline's steps when --baseline-steps is not given."""
    return min(steps, INTERLEAVED_BASELINE_STEPS if interleave else BASELINE_STEPS)


@dataclass
class TrainConfig:
    run_id: str | None = None
    home_id: str | None = None  # the rngdctl home whose run this is (the daemon's; with run_id)
    model: str = "tiny-llama"  # a named config or a folder with config.json
    lora: int = 0  # 0: full fine-tuning; N: LoRA adapters of rank N
    resident_layers: int = 0  # per card: layers whose master and AdamW stay on the card
    backend: str = "cpu"  # comma list, one entry per card
    steps: int = 60
    seq_len: int = 64
    accum: int = 2  # micro-batches per optimizer step
    micro_batch: int = 1  # sequences per micro-batch
    lr: float = 1e-3  # peak learning rate
    schedule: str = "cosine"  # warm-up then cosine to 0.1 lr, or "constant" after warm-up
    warmup: int | None = None  # warm-up steps; default min(10, max(1, steps // 10))
    weight_decay: float = 0.01  # on matrices only
    max_grad_norm: float = 1.0  # global-norm clipping; 0 turns it off
    data: str = "synthetic"  # synthetic | nsmc:PATH | jsonl:PATH | parquet:PATH | datasets:DIR
    pack: bool = False  # fill each row with several examples (trainer/data/packing.py)
    seed: int = 0  # model init and data order
    checkpoint: bool = False  # recompute each layer's forward in the backward
    threads: int | None = None  # torch host threads; None: torch's default
    baseline: bool = False  # run an all-offload pass first, for the step-time model
    baseline_steps: int | None = None  # default: default_baseline_steps
    settle: int = 60  # with --baseline: at most this many untimed settling steps; 0: none
    interleave: int = 0  # with --baseline: alternate the passes in blocks of this many steps
    cache_dir: str | None = None  # where trained tokenizers are cached
    log: str | None = None  # records also go to this file
    # --- the run's output (trainer/output/folder.py) ---
    out: str | None = None  # the saved model and checkpoints/ go here
    output_mode: int = 0o700  # out's mode; its files' the same less execute
    merge: bool = False  # with --lora: merged full weights instead of the adapter
    checkpoint_every: int | None = None  # main steps between checkpoints; None: on SIGTERM only
    keep_checkpoints: int = 2
    resume: str = "auto"  # auto: the newest complete checkpoint under out, if any; or a PATH
    resume_foreign: bool = False  # --resume PATH may be another run's (or home's) checkpoint
    on_checkpoint_error: str = "continue"  # a checkpoint that cannot be written: go on or stop
    # --- the held-out loss ---
    eval_data: str | None = None  # same forms as data
    eval_split: float | None = None  # or this fraction of data, held out by example
    eval_every: int | None = None  # main steps between evaluations (and before the first)
    eval_max_examples: int = MAX_EVAL_EXAMPLES  # past it, a seeded draw of this many
    # --- bounds on what is read ---
    max_data_bytes: int = MAX_DATA_BYTES  # a --data or --eval-data file larger is refused

    def validate(self) -> None:
        for name in ("steps", "seq_len", "accum", "micro_batch"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if self.seq_len < 4:
            raise UsageError("--seq-len must be at least 4")
        if self.resident_layers < 0:
            raise UsageError("--resident-layers must be 0 or more")
        if not self.lr > 0:
            raise UsageError("--lr must be positive")
        if self.lora < 0:
            raise UsageError("--lora rank must be positive")
        if self.schedule not in ("cosine", "constant"):
            raise UsageError("--schedule must be cosine or constant")
        if self.threads is not None and self.threads < 1:
            raise UsageError("--threads must be at least 1")
        if self.baseline_steps is not None and self.baseline_steps < 1:
            raise UsageError("--baseline-steps must be at least 1")
        if self.settle < 0:
            raise UsageError("--settle must be 0 or more")
        if self.interleave < 0:
            raise UsageError("--interleave must be 0 (off) or a block of steps")
        self._validate_output()

    def _validate_output(self) -> None:
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise UsageError("--checkpoint-every must be at least 1")
        if self.keep_checkpoints < 1:
            raise UsageError("--keep-checkpoints must be at least 1")
        if self.home_id is not None and not self.run_id:
            raise UsageError("--home-id needs --run-id: a home's run is named by both")
        if self.out is not None:
            why = unusable_output(self.out)
            if why is not None:
                raise UsageError(f"--out {self.out!r}: {why}")
        try:
            parse_mode(f"{self.output_mode:o}")
        except ValueError as exc:
            raise UsageError(f"--output-mode {exc}") from None
        if self.out is None and (self.checkpoint_every or self.resume != "auto"):
            raise UsageError("--checkpoint-every and --resume need --out (where checkpoints go)")
        if self.resume_foreign and self.resume == "auto":
            raise UsageError("--resume-foreign needs --resume PATH (auto takes only this run's "
                             "own checkpoints)")
        if self.merge and not self.lora:
            raise UsageError("--merge needs --lora")
        if self.on_checkpoint_error not in ("continue", "stop"):
            raise UsageError("--on-checkpoint-error must be continue or stop")
        if self.eval_data is not None and self.eval_split is not None:
            raise UsageError("give --eval-data or --eval-split, not both")
        if self.eval_split is not None and not 0 < self.eval_split < 1:
            raise UsageError("--eval-split must be a fraction in (0, 1)")
        if self.eval_max_examples < 1:
            raise UsageError("--eval-max-examples must be at least 1")
        if self.max_data_bytes < 1:
            raise UsageError("--max-data-bytes must be at least 1")
        if self.eval_every is not None:
            if self.eval_every < 1:
                raise UsageError("--eval-every must be at least 1")
            if self.eval_data is None and self.eval_split is None:
                raise UsageError("--eval-every needs --eval-data or --eval-split")
