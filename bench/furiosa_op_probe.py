"""Per node of one graph of the training step: furiosa-torch's compile and gradient build, timed.

The op report (``trainer check --backend furiosa:N``) gives one verdict per op once every
graph is probed. This probes one graph of the step (as the furiosa backend runs it:
trainer/backends/furiosa_modules.py), or some of its ops, node by node instead, with the report's
own probes, each compile in a child given ``--limit`` seconds, and prints a line per node with its
time. Run it with the furiosa environment's python:

    PYTHONPATH=. nice -n 15 $(python3 deploy/furiosa/env.py path)/bin/python \\
        bench/furiosa_op_probe.py --model tiny-llama --graph layer --ops aten::mm --grad

``--grad``: the package's own gradient build (``op_report.package_grad``) of each node whose op it
differentiates, instead of the op's forward compile; ``--formula``: the backward ops of torch's
formula (``op_report.formula_backward``) for each node whose op the package does not differentiate.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from trainer.backends import card_step, furiosa_torch, op_report


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--graph", choices=("rotary", "embedding", "layer", "head", "adamw"),
                   default="layer")
    p.add_argument("--ops", default="", help="comma list of ATen ops (default: every op)")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--limit", type=float, default=op_report.COMPILE_LIMIT_S,
                   help="seconds one compile may take (default %(default)g)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--grad", action="store_true")
    mode.add_argument("--formula", action="store_true")
    args = p.parse_args(argv)

    furiosa_torch.fuse_cards()
    torch.set_num_threads(1)  # the compiles run in forked children
    piece = next(g for g in card_step.step_pieces(args.model, args.seq_len) if g.key == args.graph)
    traced = op_report._trace(piece.fn, piece.inputs)
    nodes = {n.name: n for n in traced.gm.graph.nodes}
    only = set(filter(None, args.ops.split(",")))
    own = op_report.differentiated_by_package()
    caches = op_report.new_caches()
    for r in traced.reports:
        name, node = r.report.target_name, nodes[r.node_name]
        if not name.startswith("aten::") or (only and name not in only):
            continue
        if args.grad and (name not in own or not op_report._wants_grad(node)):
            continue
        if args.formula and (name in own or name in op_report.VIEWS
                             or not op_report._wants_grad(node)):
            continue
        t0 = time.perf_counter()
        if args.grad:
            status, why = op_report.package_grad(node, caches["package"], args.limit)
        elif args.formula:
            found = op_report.formula_backward(node, True, caches, args.limit)
            status = ", ".join(f"{op} {verdict}" for op, verdict, _ in found) or "no ops"
            why = "; ".join(w for _, _, w in found if w)
        else:
            status, why = op_report.compile_node(traced, node, r.report.probe_id, caches["compile"],
                                                 args.limit)
        what = "gradient build" if args.grad else "formula" if args.formula else "compile"
        print(f"{time.perf_counter() - t0:8.1f} s {what} {name} {op_report._shapes(node)}: "
              f"{status} {why}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
