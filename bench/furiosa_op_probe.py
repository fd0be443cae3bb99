"""Per node of one graph of the training step: furiosa-torch's compile and gradient build, timed.

The op report (``trainer check --backend furiosa:N``) gives one verdict per op once every
graph is probed; a compile can take minutes on a loaded host, and the package's compiler can
panic. This probes one graph node by node instead, printing a ``start`` line before each
compile, so a slow or hanging compile is named while it runs. Run it with the furiosa
environment's python:

    PYTHONPATH=. $(python3 deploy/furiosa/env.py path)/bin/python bench/furiosa_op_probe.py \\
        --model tiny-llama --graph layer --ops aten::linear,aten::matmul [--grad]

``--grad``: the package's own gradient build (``ops._package_grad``) of each node whose op it
differentiates, instead of the op's forward compile; ``--formula``: the backward ops of torch's
formula (``ops._formula_backward``) for each node whose op the package does not differentiate.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch.utils import _pytree as pytree

from trainer import data, furiosa_torch, models, ops


def graph_fn(model_name: str, graph: str, seq_len: int):
    """(function, its input) for the embedding (as the card runs it), the decoder layer or the
    norm + head + loss."""
    from transformers.masking_utils import create_causal_mask

    spec = models.resolve(model_name)
    model = models.build(spec, None if spec.folder else data.SYNTHETIC_VOCAB, seed=0)
    cfg, inner = model.config, model.model
    ids, labels = data.synthetic(seq_len, min(cfg.vocab_size, data.SYNTHETIC_VOCAB), 0, count=1)
    pos = torch.arange(seq_len)[None, :]
    h = torch.randn(1, seq_len, cfg.hidden_size)
    rope = inner.rotary_emb(h, position_ids=pos)
    mask = create_causal_mask(config=cfg, inputs_embeds=h, attention_mask=torch.ones_like(ids),
                              cache=None, position_ids=pos)

    def layer(x):
        with torch.enable_grad():
            return inner.layers[0](x.requires_grad_(True), attention_mask=mask,
                                   position_ids=pos, position_embeddings=rope)

    def head(x):
        with torch.enable_grad():
            logits = model.lm_head(inner.norm(x.requires_grad_(True)))
            return model.loss_function(logits, labels, cfg.vocab_size,
                                       num_items_in_batch=seq_len)

    embed = furiosa_torch.IndexSelectEmbedding(inner.embed_tokens)

    def embedding(ids):
        with torch.enable_grad():
            return embed(ids)

    if graph == "embedding":
        return embedding, ids
    return {"layer": layer, "head": head}[graph], h


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--graph", choices=("embedding", "layer", "head"), default="layer")
    p.add_argument("--ops", default="", help="comma list of ATen ops (default: every op)")
    p.add_argument("--seq-len", type=int, default=32)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--grad", action="store_true")
    mode.add_argument("--formula", action="store_true")
    args = p.parse_args(argv)
    from furiosa.torch import dryrun

    furiosa_torch.fuse_cards()
    fn, h = graph_fn(args.model, args.graph, args.seq_len)
    traced = dryrun.dryrun(fn, h, verbose=False, trace_only=True)
    only = set(filter(None, args.ops.split(",")))
    own = ops.differentiated_by_package()
    for i, node in enumerate(traced.gm.graph.nodes):
        name = ops._norm(node.target) if node.op == "call_function" else ""
        if not name.startswith("aten::") or (only and name not in only):
            continue
        if args.grad and (name not in own or not ops._wants_grad(node)):
            continue
        if args.formula and (name in own or name in ops.VIEWS or not ops._wants_grad(node)):
            continue
        shapes = [tuple(a.meta["val"].shape) for a in pytree.tree_leaves(node.args)
                  if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)]
        what = "gradient build" if args.grad else "formula" if args.formula else "compile"
        print(f"start {what} {name} {shapes}", flush=True)
        t0 = time.perf_counter()
        if args.grad:
            status, why = ops._package_grad(node, {})
        elif args.formula:
            found = ops._formula_backward(node, True, {})
            status = ", ".join(f"{r.target_name} {r.status.name}" for r in found) or "no ops"
            why = "; ".join(furiosa_torch.one_line(r.exception) for r in found if r.exception)
        else:
            r = dryrun._probe_fx_node(node, traced.gm, i, None)
            status, why = r.status.name, furiosa_torch.one_line(r.exception) if r.exception else ""
        print(f"{time.perf_counter() - t0:8.1f} s {what} {name} {shapes}: {status} {why}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
