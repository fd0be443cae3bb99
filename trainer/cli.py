"""``python -m trainer``: train, check, compile.

Records go to stdout, or with ``--log FILE`` to that file only (trainer/output/steplog.py:
each step once, also after a resume); human lines go to stderr, with ``--log`` a
progress line too. Exit codes
(trainer.records): 0 ok, 1 error, 2 bad input, 3 out of memory; 143 after
SIGTERM, which stops the run after the step in progress: with ``--out`` it
writes a checkpoint and an ``end`` record with status ``preempted``, without
one ``cancelled``.

Examples:

    python -m trainer train --run-id r1 --model tiny-llama --full --resident-layers 2 \\
        --backend cpu,cpu --steps 60 --seq-len 64 --accum 2 --lr 1e-3 --data synthetic \\
        --seed 0 --log r1.jsonl --baseline
    python -m trainer check --backend cpu
    python -m trainer compile --backend furiosa:auto
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback

from trainer import ownership
from trainer.config import MAX_EVAL_EXAMPLES
from trainer.datafile import MAX_DATA_BYTES, MAX_LINE_BYTES
from trainer.errors import Cancelled, DeviceOutOfMemory, Preempted, TrainerError, UsageError
from trainer.records import EXIT_ERROR, EXIT_OK, EXIT_OOM, EXIT_USAGE, End, RecordWriter

EXIT_CANCELLED = 128 + signal.SIGTERM


class _Parser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr and exit 2, without the usage block."""

    def error(self, message: str):
        print(f"trainer: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m trainer", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = sub.add_parser("train", help="train a model layer by layer and write step records",
                       description="Train, writing the step-record contract to stdout, or to "
                                   "--log FILE (then stderr shows the progress).")
    t.add_argument("--run-id", default=None, help="id of the run, copied into every start record")
    t.add_argument("--home-id", default=None,
                   help="the rngdctl home whose run this is (the daemon passes it): with "
                        "--run-id, it names who owns --out")
    t.add_argument("--model", default="tiny-llama",
                   help="tiny-llama, tiny-qwen2, llama-3.1-8b-mini, or a local model folder")
    kind = t.add_mutually_exclusive_group()
    kind.add_argument("--full", action="store_true", help="train every parameter (the default)")
    kind.add_argument("--lora", type=int, metavar="RANK", default=0,
                      help="train LoRA adapters of this rank on a frozen model")
    t.add_argument("--resident-layers", type=int, default=0, metavar="R",
                   help="layers per card whose master weights and AdamW stay on the card")
    t.add_argument("--backend", default="cpu",
                   help="comma list, one per card: cpu, cuda[:N], furiosa:auto, furiosa:N")
    t.add_argument("--steps", type=int, default=60)
    t.add_argument("--seq-len", type=int, default=64)
    t.add_argument("--accum", type=int, default=2, help="micro-batches per optimizer step")
    t.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch")
    t.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    t.add_argument("--schedule", choices=("cosine", "constant"), default="cosine",
                   help="after linear warm-up: cosine decay to 0.1 lr, or constant")
    t.add_argument("--warmup", type=int, default=None,
                   help="warm-up steps (default min(10, steps/10))")
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--max-grad-norm", type=float, default=1.0, help="0 turns clipping off")
    t.add_argument("--data", default="synthetic",
                   help="synthetic, nsmc:PATH, jsonl:PATH or PATH.jsonl, parquet:PATH or "
                        "PATH.parquet, datasets:DIR or a folder datasets' save_to_disk wrote; "
                        "lines or rows of messages (the model's chat template), ShareGPT, "
                        "Alpaca, prompt/response or text")
    t.add_argument("--pack", action="store_true",
                   help="fill each --seq-len row with several examples, each attending only "
                        "to itself (default: one example a row, padded)")
    t.add_argument("--max-data-bytes", type=int, default=MAX_DATA_BYTES, metavar="N",
                   help="refuse a --data or --eval-data file larger than this (default "
                        f"{MAX_DATA_BYTES >> 20} MiB); read a line at a time, each at most "
                        f"{MAX_LINE_BYTES >> 20} MiB")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=None,
                   help="host threads for torch (default: torch's own, or $OMP_NUM_THREADS)")
    t.add_argument("--checkpoint-layers", action="store_true",
                   help="recompute each layer's forward in the backward (less activation memory)")
    t.add_argument("--baseline", action="store_true",
                   help="run an all-offload pass first on the same cards")
    t.add_argument("--baseline-steps", type=int, default=None,
                   help="default: --steps, at most 200 with --interleave, 40 without")
    t.add_argument("--settle", type=int, default=60, metavar="N",
                   help="with --baseline: untimed steps on a throwaway copy until the step time "
                        "settles (median of 5 within 3%% of the 5 before), at most N; 0: none")
    t.add_argument("--interleave", type=int, default=0, metavar="B",
                   help="with --baseline: alternate baseline and main in blocks of B steps, "
                        "in mirrored pairs (ABBA); 0: baseline first, then main")
    t.add_argument("--cache-dir", default=None,
                   help="tokenizer cache (default $RNGDCTL_CACHE or ~/.cache/rngdctl)")
    t.add_argument("--log", default=None, metavar="FILE",
                   help="write the records here (appended; a resume writes no step twice) "
                        "instead of stdout, and show the progress on stderr")
    o = t.add_argument_group("the run's output")
    o.add_argument("--out", default=None, metavar="DIR",
                   help="write the fine-tuned model here at the end (a transformers folder, or "
                        "a PEFT adapter with --lora), and checkpoints under DIR/checkpoints")
    o.add_argument("--output-mode", type=_output_mode, default=ownership.DEFAULT_MODE,
                   metavar="MODE",
                   help="--out's mode, its files' the same less execute (default 0700: yours "
                        "alone; 0750 shares them with your group)")
    o.add_argument("--merge", action="store_true",
                   help="with --lora: write merged full weights instead of the adapter")
    o.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="a checkpoint every N main steps (default: only on SIGTERM)")
    o.add_argument("--keep-checkpoints", type=int, default=2, metavar="K",
                   help="keep the newest K complete checkpoints (default 2)")
    o.add_argument("--resume", default="auto", metavar="auto|PATH",
                   help="auto (default): go on from the newest complete checkpoint under "
                        "--out, if there is one; PATH: from that checkpoint")
    o.add_argument("--resume-foreign", action="store_true",
                   help="with --resume PATH: go on from a checkpoint of another run or home "
                        "(refused without it, naming whose it is)")
    o.add_argument("--on-checkpoint-error", choices=("continue", "stop"), default="continue",
                   help="a checkpoint that cannot be written (a full disk): go on training, "
                        "the previous one kept, or stop (default continue)")
    e = t.add_argument_group("the held-out loss")
    e.add_argument("--eval-data", default=None, metavar="SPEC",
                   help="held-out data, in --data's forms")
    e.add_argument("--eval-split", type=float, default=None, metavar="F",
                   help="hold out this fraction of --data's examples instead")
    e.add_argument("--eval-every", type=int, default=None, metavar="N",
                   help="the held-out loss every N main steps (default: before the first and "
                        "after the last only)")
    e.add_argument("--eval-max-examples", type=int, default=MAX_EVAL_EXAMPLES, metavar="N",
                   help="evaluate at most N held-out examples, a seeded draw past it (default "
                        f"{MAX_EVAL_EXAMPLES})")
    t.set_defaults(func=cmd_train)

    c = sub.add_parser("check", help="compare one forward and backward on a backend with CPU fp32",
                       description="One forward and backward on BACKEND and on the CPU fp32 "
                                   "reference; prints max errors; exits 1 over tolerance. "
                                   "furiosa:N without a card: the op report of one training "
                                   "step (what furiosa-torch compiles and what it cannot); "
                                   "exits 1 when an op cannot run on a card.")
    c.add_argument("--backend", default="cpu")
    c.add_argument("--model", default="tiny-llama")
    c.add_argument("--seq-len", type=int, default=32)
    c.add_argument("--resident-layers", type=int, default=0)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--rtol", type=float, default=None,
                   help="relative tolerance (default 1e-4 for cpu and cuda, 5e-2 for furiosa)")
    c.add_argument("--json", action="store_true", help="print the comparison as JSON")
    c.add_argument("--ops", action="store_true",
                   help="furiosa: the op report of one training step even with a card (it is "
                        "what check gives without one)")
    c.add_argument("--trace-only", action="store_true",
                   help="op report: list the ops without compile-probing each (fast)")
    c.add_argument("--compile-limit", type=float, default=None, metavar="S",
                   help="op report: seconds one compile may take before it is reported as "
                        "timed out (default 900)")
    c.add_argument("--lora", type=int, default=0, metavar="RANK",
                   help="op report: the step of LoRA adapters of this rank on the frozen model")
    c.set_defaults(func=cmd_check)

    k = sub.add_parser("compile", help="warm a backend's compile cache without training",
                       description="Compile every graph a training step runs, recording each "
                                   "graph's compile time as an event record.")
    k.add_argument("--backend", default="cpu")
    k.add_argument("--model", default="tiny-llama")
    k.add_argument("--seq-len", type=int, default=64)
    k.add_argument("--micro-batch", type=int, default=1)
    k.add_argument("--log", default=None, metavar="FILE",
                   help="write the records here instead of stdout")
    k.set_defaults(func=cmd_compile)
    return p


def _output_mode(text: str) -> int:
    try:
        return ownership.parse_mode(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# === Commands ================================================================


class _Stop:
    """SIGTERM and SIGINT only set a flag; the engine checks it at every layer."""

    def __init__(self):
        self.flag = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, signum, frame):
        self.flag = True

    def __call__(self) -> bool:
        return self.flag


def _record_writer(path: str | None):
    """Where the records go: stdout without ``--log``, else the log file alone."""
    if path is None:
        return RecordWriter(sys.stdout)
    from trainer.output.steplog import open_log

    return open_log(path)


def _close(writer) -> None:
    if not isinstance(writer, RecordWriter):
        writer.close()


def cmd_train(args) -> int:
    from trainer.config import TrainConfig
    from trainer.output.console import console, log
    from trainer.train import Recipe

    stop = _Stop()
    # Whatever the trainer makes (--out, its checkpoints, the model) is made no more open
    # than --output-mode, whatever umask the daemon or the shell handed down.
    os.umask(0o777 & ~args.output_mode)
    writer = _record_writer(args.log)
    # With --log, stdout is quiet: a person follows the run on stderr.
    console.progress = args.log is not None
    cfg = TrainConfig(
        run_id=args.run_id, home_id=args.home_id, model=args.model, lora=args.lora,
        resident_layers=args.resident_layers, backend=args.backend, steps=args.steps,
        seq_len=args.seq_len, accum=args.accum, micro_batch=args.micro_batch, lr=args.lr,
        schedule=args.schedule, warmup=args.warmup, weight_decay=args.weight_decay,
        max_grad_norm=args.max_grad_norm, data=args.data, pack=args.pack, seed=args.seed,
        checkpoint=args.checkpoint_layers, threads=args.threads, baseline=args.baseline,
        baseline_steps=args.baseline_steps, settle=args.settle,
        interleave=args.interleave, cache_dir=args.cache_dir, log=args.log, out=args.out,
        output_mode=args.output_mode, merge=args.merge, checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints, resume=args.resume,
        resume_foreign=args.resume_foreign,
        on_checkpoint_error=args.on_checkpoint_error, eval_data=args.eval_data,
        eval_split=args.eval_split, eval_every=args.eval_every,
        eval_max_examples=args.eval_max_examples, max_data_bytes=args.max_data_bytes)
    recipe = None

    def end(status: str, error: str | None = None, **data) -> None:
        label = getattr(recipe, "label", None)
        output = recipe.outdir.end_data() if recipe is not None else {}
        writer.write(End(status=status, error=error, config_label=label,
                         data={**output, **data}))

    try:
        recipe = Recipe(cfg, writer, should_stop=stop)
        recipe.setup()
        summaries = recipe.run()
        recipe.label = summaries[-1].label
        end("ok", steps={s.label: len(s.losses) for s in summaries})
        return EXIT_OK
    except Preempted as exc:
        end("preempted", str(exc))
        log(str(exc))
        return EXIT_CANCELLED
    except Cancelled as exc:
        end("cancelled", str(exc))
        log(str(exc))
        return EXIT_CANCELLED
    except DeviceOutOfMemory as exc:
        end("oom", str(exc), where=exc.where)
        print(f"trainer: {exc}", file=sys.stderr)
        return EXIT_OOM
    except UsageError as exc:
        end("error", str(exc))
        print(f"trainer: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TrainerError as exc:  # a checkpoint that could not be written, with 'stop'
        end("error", str(exc))
        print(f"trainer: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 - anything unexpected: the record, then the traceback
        known = _backend_failure(exc, args.backend)
        if known is not None:  # an op the card's package cannot run: bad input, one line
            end("error", known)
            print(f"trainer: error: {known}", file=sys.stderr)
            return EXIT_USAGE
        end("error", f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
        return EXIT_ERROR
    finally:
        _close(writer)


def _backend_failure(exc: BaseException, backend: str) -> str | None:
    """One line for a failure the card's package explains (an op it cannot run), else None."""
    if "furiosa" not in backend:
        return None
    from trainer.backends import furiosa_torch

    return furiosa_torch.describe_op_failure(exc)


def cmd_check(args) -> int:
    from trainer.backends.check import run_check

    return run_check(args.backend, args.model, args.seq_len, args.resident_layers, args.seed,
                     args.rtol, as_json=args.json, ops=args.ops, probe=not args.trace_only,
                     compile_limit=args.compile_limit, lora=args.lora)


def cmd_compile(args) -> int:
    from trainer.backends.compile import run_compile

    writer = _record_writer(args.log)
    try:
        return run_compile(args.backend, args.model, args.seq_len, args.micro_batch, writer)
    except UsageError as exc:
        writer.write(End(status="error", error=str(exc)))
        print(f"trainer: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except DeviceOutOfMemory as exc:
        writer.write(End(status="oom", error=str(exc), data={"where": exc.where}))
        print(f"trainer: {exc}", file=sys.stderr)
        return EXIT_OOM
    except Exception as exc:  # an op the card's package cannot run: one line; else re-raised
        known = _backend_failure(exc, args.backend)
        if known is None:
            raise
        writer.write(End(status="error", error=known))
        print(f"trainer: error: {known}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        _close(writer)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if "furiosa" in getattr(args, "backend", ""):
        # furiosa-torch's native code logs on fd 1: keep it out of the record stream.
        from trainer.backends.furiosa_torch import keep_records_clean

        keep_records_clean()
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"trainer: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TrainerError as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # check on a card: an op its package cannot run is one line
        known = _backend_failure(exc, getattr(args, "backend", ""))
        if known is None:
            raise
        print(f"trainer: error: {known}", file=sys.stderr)
        return EXIT_USAGE

