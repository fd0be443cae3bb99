"""Does every op of the furiosa backend's chunked loss compile for a card at a real vocabulary?

The op report compiles the loss at the report's own vocabulary (128 words: the synthetic
models'); this compiles the loss's forward and its written-out backward
(``ChunkedCrossEntropy``) at ``--tokens`` x ``--vocab`` in the trainer's chunks
(``loss_chunk_rows``), each op in a child given ``--limit`` seconds, with the trainer's
compiler settings, and prints the op report's rows. Run it with the furiosa environment's
python:

    PYTHONPATH=. nice -n 15 $(python3 deploy/furiosa/env.py path)/bin/python \\
        bench/furiosa_loss_compile.py --tokens 260 --vocab 128256
"""

from __future__ import annotations

import argparse
import sys

import torch

from trainer.backends import card_step, furiosa_modules, furiosa_torch, op_report


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=260)
    p.add_argument("--vocab", type=int, default=128_256)
    p.add_argument("--limit", type=float, default=600.0, help="seconds per compile")
    args = p.parse_args(argv)
    furiosa_torch.fuse_cards()
    print(f"compiler: {furiosa_torch.configure_compiler()}; chunks of "
          f"{furiosa_modules.loss_chunk_rows(args.vocab)} tokens", flush=True)
    torch.set_num_threads(1)  # the compiles are forked
    logits = torch.randn(args.tokens, args.vocab)
    target = torch.randint(0, args.vocab, (args.tokens,))
    target[::7] = -1  # some tokens not counted
    target = target.to(torch.float32)  # as host_targets hands them to the card

    def loss(x):
        with torch.enable_grad():
            return furiosa_modules.loss_from_targets(x.requires_grad_(True), target,
                                                     args.vocab, args.tokens)

    graph = op_report.trace_graph("loss", loss, (logits,), True,
                                  op_report.differentiated_by_package(),
                                  op_report.new_caches(), limit_s=args.limit,
                                  explicit=(card_step.loss_backward(logits, target),))
    for r in graph.rows:
        print(f"{r.op} {r.part} {r.count} {r.status}{': ' + r.why if r.why else ''} "
              f"{r.grad or r.of}", flush=True)
    print("every op compiles" if not graph.failing() else
          f"cannot run: {[r.op for r in graph.failing()]}")
    return 0 if not graph.failing() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
