"""Step time of the layer engine on cpu against the plain whole-model loop.

    OMP_NUM_THREADS=2 .venv/bin/python bench/trainer_step.py [--steps 20] [--seq-len 256]

Model ``llama-3.1-8b-mini`` (Llama-3.1-8B's layer structure: 8 layers, hidden
256), seq 256, accum 2, micro-batch 1, synthetic data, seed 0. Three
trainers on the same model and batches, stepped in turn in every round
(alternating the order) so machine noise hits them alike:

- ``plain``: the whole-model PyTorch loop (trainer.engine.plain),
- ``resident``: the engine, one cpu card, every layer resident,
- ``offload``: the engine, one cpu card, no layer resident.

Prints the median step time of each over the rounds after two warm-up
steps, the engine's median phase split for both placements, and checks the
target: all-resident at most 1.10x the plain loop.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from trainer import models
from trainer.backends import kinds
from trainer.data import batches
from trainer.engine import optim
from trainer.engine.layer_engine import LayerEngine
from trainer.engine.plain import PlainLoop
from trainer.records import PHASES

WARMUP = 2


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.1-8b-mini")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--accum", type=int, default=2)
    args = ap.parse_args()

    spec = models.resolve(args.model)
    vocab = 2048
    stream = iter(batches.make_batches(batches.open_source("synthetic"), None, args.seq_len, 1, 0,
                                       batches.SYNTHETIC_VOCAB))
    steps = [[next(stream) for _ in range(args.accum)] for _ in range(args.steps)]
    sched = optim.Schedule(1e-3, args.steps, 2)

    plain = PlainLoop(models.build(spec, vocab, 0), torch.device("cpu"), 1e-3, 0.01, 1.0)
    layers = models.num_layers(plain.model)
    resident = LayerEngine(models.build(spec, vocab, 0), kinds.parse("cpu"), layers,
                           1e-3, 0.01, 1.0)
    offload = LayerEngine(models.build(spec, vocab, 0), kinds.parse("cpu"), 0,
                          1e-3, 0.01, 1.0)

    times = {"plain": [], "resident": [], "offload": []}
    phases = {"resident": [], "offload": []}
    losses = {"plain": [], "resident": [], "offload": []}

    def run(name, batch, lr):
        t0 = time.perf_counter()
        if name == "plain":
            loss, _ = plain.step(batch, lr)
            ph = None
        else:
            res = (resident if name == "resident" else offload).step(batch, lr)
            loss, ph = res.loss, res.phases
        dt = time.perf_counter() - t0
        return loss, dt, ph

    order = ["plain", "resident", "offload"]
    for i, batch in enumerate(steps):
        lr = sched.at(i + 1)
        for name in (order if i % 2 == 0 else order[::-1]):
            loss, dt, ph = run(name, batch, lr)
            losses[name].append(loss)
            if i >= WARMUP:
                times[name].append(dt)
                if ph is not None:
                    phases[name].append(ph)

    params = sum(p.numel() for p in plain.model.parameters())
    print(f"{args.model}: {layers} layers, {params / 1e6:.1f} M parameters, seq {args.seq_len}, "
          f"accum {args.accum}, threads {torch.get_num_threads()}, "
          f"{len(times['plain'])} timed steps (after {WARMUP} warm-up), medians")
    med = {k: statistics.median(v) for k, v in times.items()}
    for name in order:
        print(f"{name:<9} step {med[name] * 1000:8.1f} ms   (min {min(times[name]) * 1000:.1f})")
    print()
    print(f"{'phase (ms)':<13}" + "".join(f"{n:>11}" for n in ("resident", "offload")))
    for ph in PHASES:
        print(f"{ph:<13}" + "".join(
            f"{statistics.median(p[ph] for p in phases[n]) * 1000:>11.2f}"
            for n in ("resident", "offload")))
    drift = max(abs(a - b) / abs(b) for a, b in zip(losses["offload"], losses["plain"]))
    drift_r = max(abs(a - b) / abs(b) for a, b in zip(losses["resident"], losses["plain"]))
    print(f"\nmax relative loss difference vs plain: resident {drift_r:.1e}, offload {drift:.1e}")
    ratio = med["resident"] / med["plain"]
    ok = ratio <= 1.10
    print(f"all-resident / plain = {ratio:.3f} (target <= 1.10): {'PASS' if ok else 'FAIL'}")
    print(f"all-offload / all-resident = {med['offload'] / med['resident']:.3f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
