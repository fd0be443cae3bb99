"""The loss curve on the NSMC sample: 100 steps of a small model, by step range.

    OMP_NUM_THREADS=2 .venv/bin/python bench/trainer_nsmc_curve.py [--steps 100]

Runs ``python -m trainer train`` (tiny-llama, 2 cpu cards, 1 resident layer
per card, seq 64, accum 2, micro-batch 8, lr 3e-3, seed 0) on
../shared/data/nsmc/ratings_train_sample.txt, reads its step records back
through the contract parser and prints the mean loss per step range, the
step-1 loss and the median step time of steps 6-N. The loss is on the answer
tokens only (" 긍정"/" 부정" and the end token). Checks that the last range's
mean is below the first's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trainer.records import Step, parse_line

NSMC = REPO.parent / "shared" / "data" / "nsmc" / "ratings_train_sample.txt"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--model", default="tiny-llama")
    args = ap.parse_args()
    if not NSMC.exists():
        print(f"the NSMC sample is not at {NSMC}")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "trainer", "train", "--run-id", "nsmc-curve",
               "--model", args.model, "--full", "--resident-layers", "1", "--backend", "cpu,cpu",
               "--steps", str(args.steps), "--seq-len", "64", "--accum", "2",
               "--micro-batch", "8", "--lr", "3e-3", "--data", f"nsmc:{NSMC}", "--seed", "0",
               "--cache-dir", tmp]
        print(" ".join(cmd[1:]))
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    if proc.returncode != 0:
        print(proc.stderr)
        return 1
    steps = [r for r in map(parse_line, proc.stdout.splitlines()) if isinstance(r, Step)]
    n = len(steps)
    edges = [(1, 10), (11, 25), (26, 50), (51, 75), (76, n)]
    print(f"\n{'steps':<9}{'mean loss':>10}{'min':>8}{'max':>8}")
    means = []
    for lo, hi in edges:
        part = [s.loss for s in steps if lo <= s.step <= hi]
        means.append(statistics.fmean(part))
        print(f"{lo}-{hi:<6}{means[-1]:>10.3f}{min(part):>8.3f}{max(part):>8.3f}")
    print(f"\nstep 1 loss {steps[0].loss:.4f}, step {n} loss {steps[-1].loss:.4f}")
    print(f"median step time, steps 6-{n}: "
          f"{statistics.median(s.step_s for s in steps[5:]) * 1000:.1f} ms, "
          f"{steps[0].tokens} tokens per step")
    ok = means[-1] < means[0]
    print("loss falls:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
