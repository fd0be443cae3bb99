"""The same compute in different placements, in one process: does fwd_bwd run at one speed?

The step model predicts the asked config's fwd_bwd as the all-offload
baseline's (the same arithmetic). On the cpu backend the "card" is the host
itself, so the compute shares its caches with the work the offloaded layers
do outside fwd_bwd (uploads, downloads, the host optimizer). This measures
fwd_bwd per placement directly, with the trainer's engine and nothing else.

    OMP_NUM_THREADS=1 .venv/bin/python bench/trainer_compute_placement.py
    OMP_NUM_THREADS=1 .venv/bin/python bench/trainer_compute_placement.py \\
        --placements 1x0,1x4,1x4+4.5 --rounds 250 --block 5 [--json out.json]

A placement is ``CxR``: C cpu cards, R resident layers per card; ``CxR+MB``
adds host traffic before each of that engine's steps, outside its timed
phases: one read-modify-write pass (``add_``) over a buffer of MB MiB, the
kind of traffic an offloaded placement does between two fwd_bwds and a
resident one does not. Engines are built from one seed after one settle
(``Recipe.settle``, its copy freed once all are built); each round runs every engine for a block of B steps, the
engines' order shuffled per round (seeded), so drift and order hit all alike.

Printed per engine: the median over the rounds of its value (the median
fwd_bwd of its block's steps after the first: the first follows another
engine's steps, as ``stepmodel.pairing`` leaves out), the median of its
per-round ratio to the first engine with a bootstrap 95 % interval, and the
median of each position in the block against the round's level (position 0
is the step after the switch). Exit 0; 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.config import TrainConfig
from trainer.errors import UsageError
from trainer.records import RecordWriter
from trainer.train import Recipe

PLACEMENT = re.compile(r"(\d+)x(\d+)(?:\+(\d+(?:\.\d+)?))?")
MIB_FLOATS = (1 << 20) // 4
BOOTSTRAP = 200


@dataclass(frozen=True)
class Placement:
    text: str
    cards: int
    resident: int
    traffic_mib: float  # host traffic added before each step, MiB


def parse_placements(text: str) -> list[Placement]:
    out = []
    for item in text.split(","):
        m = PLACEMENT.fullmatch(item.strip())
        if not m or int(m.group(1)) < 1:
            raise UsageError(f"bad placement {item.strip()!r}: give CxR or CxR+MB, such as 1x4+4.5")
        out.append(Placement(item.strip(), int(m.group(1)), int(m.group(2)),
                             float(m.group(3) or 0)))
    if len(out) < 2:
        raise UsageError("--placements needs two or more, the first the reference")
    return out


class Engine:
    """One placement's engine, its data stream and its fwd_bwd times."""

    def __init__(self, recipe: Recipe, p: Placement, lr: float):
        import torch

        self.p, self.lr = p, lr
        self.engine = recipe.build_engine(p.resident)
        self.stream = iter(recipe.batches)
        self.accum = recipe.cfg.accum
        self.fwd_bwd: list[float] = []
        self.traffic = torch.zeros(int(p.traffic_mib * MIB_FLOATS)) if p.traffic_mib else None

    def block(self, steps: int) -> list[float]:
        got = []
        for _ in range(steps):
            if self.traffic is not None:
                self.traffic.add_(1.0)  # outside the step: the host traffic asked for
            micro = [next(self.stream) for _ in range(self.accum)]
            got.append(self.engine.step(micro, self.lr).phases["fwd_bwd"])
        self.fwd_bwd += got
        return got


def measure(args, placements: list[Placement]) -> dict:
    recipes: dict[int, Recipe] = {}
    for cards in sorted({p.cards for p in placements}):
        cfg = TrainConfig(model=args.model, backend=",".join(["cpu"] * cards), steps=10**6,
                          seq_len=args.seq_len, accum=args.accum, seed=args.seed)
        recipes[cards] = Recipe(cfg, RecordWriter())
        recipes[cards].setup()
    # The settling copy is freed once every engine is built, as the trainer does: an engine
    # built on its freed memory computes slower (design.md, "Compute and placement").
    settling = recipes[placements[0].cards].settle(60)
    engines = [Engine(recipes[p.cards], p, args.lr) for p in placements]
    del settling
    rng = random.Random(args.seed)
    rounds = []  # per round: each engine's value
    positions = []  # per round: each engine's block, step by step
    for _ in range(args.rounds):
        order = list(range(len(engines)))
        rng.shuffle(order)
        got = [None] * len(engines)
        for i in order:
            got[i] = engines[i].block(args.block)
        rounds.append([statistics.median(g[1:] if len(g) > 1 else g) for g in got])
        positions.append(got)
    return summarize(placements, rounds[args.warm:], positions[args.warm:], rng)


def summarize(placements, rounds, positions, rng) -> dict:
    rows = []
    for i, p in enumerate(placements):
        ratios = [r[i] / r[0] - 1 for r in rounds]
        boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios)))
                      for _ in range(BOOTSTRAP))
        lo, hi = boot[int(0.025 * BOOTSTRAP)], boot[int(0.975 * BOOTSTRAP) - 1]
        by_pos = []
        for k in range(len(positions[0][i])):
            by_pos.append(statistics.median(
                blocks[i][k] / statistics.median(v for b in blocks for v in b) - 1
                for blocks in positions))
        rows.append({"placement": p.text, "cards": p.cards, "resident": p.resident,
                     "traffic_mib": p.traffic_mib,
                     "fwd_bwd_ms": statistics.median(r[i] for r in rounds) * 1e3,
                     "vs_first": statistics.median(ratios), "vs_first_95": [lo, hi],
                     "by_position": by_pos})
    return {"rounds": len(rounds), "engines": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--placements", default="1x0,1x4,1x0,1x4+4.5",
                    help="comma list of CxR or CxR+MB; the first is the reference")
    ap.add_argument("--rounds", type=int, default=250)
    ap.add_argument("--warm", type=int, default=10, help="first rounds left out")
    ap.add_argument("--block", type=int, default=5, help="steps per engine per round")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    try:
        placements = parse_placements(args.placements)
        if args.rounds <= args.warm or args.block < 1 or args.warm < 0:
            raise UsageError("--rounds must exceed --warm, and --block be at least 1")
        result = measure(args, placements)
    except UsageError as exc:
        print(f"trainer_compute_placement: {exc}", file=sys.stderr)
        return 2
    print(f"{args.model}, blocks of {args.block}, {result['rounds']} rounds "
          f"(fwd_bwd per engine: the median of each block's steps after the first)")
    for row in result["engines"]:
        lo, hi = row["vs_first_95"]
        print(f"  {row['placement']:<10} {row['fwd_bwd_ms']:7.3f} ms  vs first "
              f"{row['vs_first'] * 100:+.2f} % (95 % {lo * 100:+.2f} .. {hi * 100:+.2f})  "
              "by position in block: "
              + " ".join(f"{v * 100:+.1f}" for v in row["by_position"]))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **result}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
