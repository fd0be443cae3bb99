"""Plain medians against block pairs for interleaved passes, on simulated steps.

Two passes of ``--steps`` steps each (the same work, so the true error is 0)
run in ``train.interleaved_order``; every step has Gaussian noise
(``--noise``), and with ``--slow F`` every step from run position ``--from``
to ``--to`` on is F times slower (a hog started there; one run per position
per ``--repeats``). Each run's error is the one ``stepmodel`` would give:
the plain medians of steps 6-N of each pass, or ``stepmodel.paired``.
Prints the share of runs outside ``--target`` and the worst |error| of each.

    .venv/bin/python bench/stepmodel_pairing.py --slow 2 --from 40 --to 55
    .venv/bin/python bench/stepmodel_pairing.py --slow 1 --noise 0.01 --repeats 2000
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon import stepmodel
from trainer.engine.timing import interleaved_order


def one_run(rng: random.Random, args, slowed_from: int) -> tuple[float, float]:
    order = interleaved_order([args.steps, args.steps], args.block)
    passes: list[list[dict]] = [[], []]
    for position, which in enumerate(order):
        t = (args.slow if position >= slowed_from else 1.0) * (1 + rng.gauss(0, args.noise))
        passes[which].append({"step": len(passes[which]) + 1, "step_s": t, "phases": {}})
    base, main = ([s["step_s"] for s in p if s["step"] > 5] for p in passes)
    plain = statistics.median(base) / statistics.median(main) - 1
    paired = statistics.median(base) / stepmodel.paired(*passes, args.block)[0]["step_s"] - 1
    return plain, paired


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40, help="steps of each pass")
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--noise", type=float, default=0.02, help="relative step-to-step spread")
    ap.add_argument("--slow", type=float, default=2.0, help="1: a steady host")
    ap.add_argument("--from", dest="first", type=int, default=40)
    ap.add_argument("--to", dest="last", type=int, default=55)
    ap.add_argument("--repeats", type=int, default=20, help="runs per start position")
    ap.add_argument("--target", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    runs = [one_run(rng, args, g) for g in range(args.first, args.last + 1)
            for _ in range(args.repeats)]
    print(f"{len(runs)} simulated runs: {' '.join(sys.argv[1:]) or '(defaults)'}")
    for i, name in enumerate(("plain medians", "block pairs")):
        errs = [r[i] for r in runs]
        outside = sum(abs(e) > args.target for e in errs) / len(errs)
        print(f"{name:14s} outside {args.target:.0%}: {outside:5.1%}   worst |error| "
              f"{max(map(abs, errs)):.1%}   spread (sd) {statistics.pstdev(errs):.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
