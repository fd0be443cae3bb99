"""The host's floor under the step model's error: two identical passes, how far apart by chance.

Each process builds two engines of the same config after the trainer's
settling steps and steps them as ``--interleave 2`` does (blocks of 2,
mirrored pairs), ``--steps`` each. Their medians over windows of
``--window`` steps (the benchmark's 40 by default; steps 1-5 left out of
the first, as everywhere) are compared three ways: the step's wall time,
the thread's CPU time (``time.thread_time``: what the scheduler gave the
process) and fwd_bwd alone. Whatever separates the two is the host, since
the work is the same: an rms of r % here means single runs of that length
land about r % off a perfect model, and a target's worst sample sits a
few r out. When wall and CPU time agree, nothing took the core away; the
same work ran at another speed.

    OMP_NUM_THREADS=1 .venv/bin/python bench/stepmodel_floor.py
    OMP_NUM_THREADS=1 .venv/bin/python bench/stepmodel_floor.py --model llama-3.1-8b-mini --processes 6

Each process is a fresh interpreter (``--one`` is what it runs), as a run is.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KINDS = ("wall", "cpu", "fwd_bwd")


def one(model: str, steps: int, resident: int) -> dict[str, list[list[float]]]:
    """Two engines of one config in this process, stepped as the trainer interleaves them."""
    sys.path.insert(0, str(REPO))
    from trainer.config import TrainConfig
    from trainer.engine import optim
    from trainer.engine.timing import interleaved_order
    from trainer.records import RecordWriter
    from trainer.train import Recipe

    cfg = TrainConfig(run_id="floor", model=model, resident_layers=resident, backend="cpu",
                      steps=steps, seq_len=64, accum=2, baseline=True, baseline_steps=steps,
                      interleave=2)
    with open(os.devnull, "w") as sink:
        recipe = Recipe(cfg, RecordWriter(sink, None))
        recipe.setup()
        recipe.settle(cfg.settle)
    engines = [recipe.build_engine(resident) for _ in range(2)]
    streams = [iter(recipe.batches) for _ in engines]
    schedule = optim.Schedule(cfg.lr, steps, optim.default_warmup(steps), cfg.schedule)
    out = {k: [[], []] for k in KINDS}
    for which in interleaved_order([steps, steps], 2):
        micro = [next(streams[which]) for _ in range(cfg.accum)]
        wall, cpu = time.perf_counter(), time.thread_time()
        result = engines[which].step(micro, schedule.at(len(out["wall"][which]) + 1))
        out["cpu"][which].append(time.thread_time() - cpu)
        out["wall"][which].append(time.perf_counter() - wall)
        out["fwd_bwd"][which].append(result.phases["fwd_bwd"])
    return out


def window_gaps(times: list[list[float]], window: int) -> list[float]:
    """The second engine's median over the first's, less 1, per window (steps 6 on)."""
    first, second = times
    gaps = []
    for start in range(0, len(first) - window + 1, window):
        lo = max(start, 5)
        a, b = first[lo:start + window], second[lo:start + window]
        gaps.append(statistics.median(b) / statistics.median(a) - 1)
    return gaps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--resident", type=int, default=0, help="resident layers of both engines")
    ap.add_argument("--steps", type=int, default=200, help="steps of each engine")
    ap.add_argument("--window", type=int, default=40, help="steps a window (a run's length)")
    ap.add_argument("--processes", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per process")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        json.dump(one(args.model, args.steps, args.resident), sys.stdout)
        return 0
    gaps: dict[str, list[float]] = {k: [] for k in KINDS}
    t0 = time.time()
    for _ in range(args.processes):
        argv = [sys.executable, __file__, "--one", "--model", args.model,
                "--steps", str(args.steps), "--resident", str(args.resident)]
        try:
            done = subprocess.run(argv, check=False, capture_output=True, text=True,
                                  timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"a process ran past --timeout {args.timeout:.0f} s", file=sys.stderr)
            return 2
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
            print(f"a process failed: {tail[0]}", file=sys.stderr)
            return 2
        times = json.loads(done.stdout)
        for k in KINDS:
            gaps[k] += window_gaps(times[k], args.window)
    print(f"two identical engines, {args.model} {args.resident} resident, {args.processes} "
          f"processes x {args.steps} steps, windows of {args.window}; {time.time() - t0:.0f} s")
    for k in KINDS:
        g = gaps[k]
        rms = math.sqrt(statistics.fmean(x * x for x in g))
        print(f"{k:8s} windows {len(g):3d}  rms {rms * 100:4.2f} %  "
              f"worst {max(map(abs, g)) * 100:4.1f} %  past 3 % {sum(abs(x) > 0.03 for x in g)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
