"""The op report: one training step of a model as furiosa-torch would run it on an RNGD card.

Hardware-free. Each distinct graph of the step is traced on the CPU by furiosa-torch's own
``dryrun`` (make_fx over real values; "a backend-agnostic operator tracing mechanism"), and
every ATen op in it is compile-probed by the package, as its eager path compiles each op on
a card: OK (compiles), FAIL (the package cannot run it), ERROR (its probe broke), SKIP (not
compiled: views, non-ATen plumbing). The graphs:

- the rotary cos/sin table (forward only: no gradient flows into it);
- the embedding, forward and backward;
- one decoder layer, forward and backward (every layer runs the same graph);
- the final norm, the head and the loss, forward and backward;
- one AdamW step over a flat buffer (what a card runs for its resident layers).

Forward and backward are told apart by tracing the forward alone as well. Gradients on a
card come from furiosa-torch's own per-op autograd for the ops in its autograd registrations
(2026.4), and otherwise from torch's derivative formulas, whose backward ops must then run on
the card themselves. The backward ops listed are torch's (traced on the CPU): for an op the
package differentiates itself, the card runs the package's backward graph instead.
"""

from __future__ import annotations

import collections
import copy
import shutil
from dataclasses import dataclass, field

import torch

from trainer import data, models

#: Ops that only reshape or view: no kernel, autograd follows the view.
VIEWS = {"aten::view", "aten::reshape", "aten::t", "aten::transpose.int", "aten::unsqueeze",
         "aten::squeeze.dim", "aten::expand", "aten::slice.Tensor", "aten::narrow",
         "aten::permute", "aten::select.int", "aten::alias", "aten::detach",
         "aten::_unsafe_view", "aten::contiguous"}
WORST = ["OK", "SKIP", "ERROR", "FAIL"]  # a row's status is its worst node's
CROSS_COMPILER = "aarch64-linux-gnu-gcc"  # what furiosa-torch builds PE code with


def why_not_probed() -> str | None:
    """Why ops cannot be compile-probed here, or None when they can."""
    if shutil.which(CROSS_COMPILER) is None:
        return (f"{CROSS_COMPILER}, which furiosa-torch compiles each op's PE code with, is "
                "not installed (apt-get install gcc-aarch64-linux-gnu)")
    return None


@dataclass
class OpRow:
    op: str
    part: str  # forward | backward | optimizer
    count: int
    status: str  # OK | FAIL | ERROR | SKIP
    grad: str = ""  # forward ops: "furiosa" | "torch formula" | "view" | ""
    why: str = ""  # the first line of the package's reason, for FAIL and ERROR


@dataclass
class Graph:
    name: str
    rows: list[OpRow] = field(default_factory=list)

    def failing(self, part: str | None = None) -> list[OpRow]:
        return [r for r in self.rows if r.status in ("FAIL", "ERROR")
                and (part is None or r.part == part)]


def _norm(op) -> str:
    return str(op).replace("aten.", "aten::").removesuffix(".default")


def differentiated_by_package() -> set[str]:
    """ATen ops furiosa-torch differentiates itself (its AutogradPrivateUse1 registrations)."""
    try:
        from furiosa.torch._custom_ops.autograd_ops import REGISTRATIONS
    except ImportError:  # 2026.2 and earlier have no per-op autograd
        return set()
    return {_norm(op) for op in REGISTRATIONS}


def _trace(fn, inputs, probe: bool):
    from furiosa.torch import dryrun

    return dryrun.dryrun(fn, *inputs, verbose=False, trace_only=not probe)


def _rows(joint, forward_only, optimizer: bool, own_grad: set[str],
          only: str | None = None) -> list[OpRow]:
    """Rows by op; ``only="forward"`` for a graph that has no backward (no grad needed)."""
    traced = joint if only == "forward" else forward_only
    fwd_counts = collections.Counter(r.report.target_name for r in traced.reports) \
        if traced is not None else collections.Counter()
    by_op: dict[str, list] = collections.defaultdict(list)
    for r in joint.reports:
        if r.report.target_name.startswith("aten::"):
            by_op[r.report.target_name].append(r.report)
    rows = []
    for op, reports in by_op.items():
        status = max((p.status.name for p in reports), key=WORST.index)
        bad = next((p for p in reports if p.status.name == status and p.exception), None)
        why = str(bad.exception).strip().splitlines()[0][:160] if bad else ""
        fwd = min(fwd_counts.get(op, 0), len(reports))
        if optimizer:
            rows.append(OpRow(op, "optimizer", len(reports), status, "", why))
            continue
        if fwd:
            grad = ("" if only == "forward" else "view" if op in VIEWS
                    else "furiosa" if op in own_grad else "torch formula")
            rows.append(OpRow(op, "forward", fwd, status, grad, why))
        if len(reports) > fwd:
            rows.append(OpRow(op, "backward", len(reports) - fwd, status, "", why))
    order = {"forward": 0, "backward": 1, "optimizer": 2}
    return sorted(rows, key=lambda r: (order[r.part], r.op))


def step_graphs(model_name: str, seq_len: int = 32, probe: bool = True) -> list[Graph]:
    """The op rows of each distinct graph of one training step of ``model_name``."""
    from transformers.masking_utils import create_causal_mask

    spec = models.resolve(model_name)
    model = models.build(spec, None if spec.folder else data.SYNTHETIC_VOCAB, seed=0)
    cfg, inner = model.config, model.model
    vocab = min(cfg.vocab_size, data.SYNTHETIC_VOCAB)
    ids, labels = data.synthetic(seq_len, vocab, 0, count=1)
    own = differentiated_by_package()
    pos = torch.arange(seq_len)[None, :]
    h = torch.randn(1, seq_len, cfg.hidden_size)
    g = torch.randn(1, seq_len, cfg.hidden_size)
    rope = inner.rotary_emb(h, position_ids=pos)
    mask = create_causal_mask(config=cfg, inputs_embeds=h,
                              attention_mask=torch.ones_like(ids), cache=None,
                              position_ids=pos)
    layer = inner.layers[0]

    def grads(out, wrt, seed):
        return torch.autograd.grad(out, wrt, seed, allow_unused=True)

    def embed_fwd(ids):
        return inner.embed_tokens(ids)

    def embed_step(ids, g):
        with torch.enable_grad():
            out = inner.embed_tokens(ids)
            return (out, *grads(out, [inner.embed_tokens.weight], g))

    def layer_fwd(x):
        with torch.enable_grad():
            return layer(x, attention_mask=mask, position_ids=pos, position_embeddings=rope)

    def layer_step(x, g):
        with torch.enable_grad():
            x = x.requires_grad_(True)
            out = layer(x, attention_mask=mask, position_ids=pos, position_embeddings=rope)
            out = out[0] if isinstance(out, tuple) else out
            return (out, *grads(out, [x, *layer.parameters()], g))

    def head_loss(x):
        logits = model.lm_head(inner.norm(x))
        return model.loss_function(logits, labels, cfg.vocab_size, num_items_in_batch=seq_len)

    def head_fwd(x):
        with torch.enable_grad():
            return head_loss(x)

    def head_step(x):
        with torch.enable_grad():
            x = x.requires_grad_(True)
            loss = head_loss(x)
            params = [*inner.norm.parameters(), *model.lm_head.parameters()]
            return (loss, *grads(loss, [x, *params], None))

    flat = torch.nn.Parameter(torch.randn(4096))
    flat.grad = torch.randn(4096)
    opt = torch.optim.AdamW([flat], lr=1e-3, foreach=False)
    opt.step()  # the state exists from the first step on: trace a later one

    def adamw_step(p):
        opt.step()
        return (p,)

    def rotary(x):
        return inner.rotary_emb(x, position_ids=pos)

    graphs = [Graph("rotary cos/sin (once per micro-batch and card)",
                    _rows(_trace(rotary, (h.clone(),), probe), None, False, own, "forward"))]
    for name, joint_fn, fwd_fn, inputs in (
            ("embedding", embed_step, embed_fwd, (ids, g)),
            ("decoder layer (every layer)", layer_step, layer_fwd, (h.clone(), g)),
            ("norm, head and loss", head_step, head_fwd, (h.clone(),))):
        forward = _trace(fwd_fn, inputs[:1], probe=False)
        joint = _trace(joint_fn, inputs, probe)
        graphs.append(Graph(name, _rows(joint, forward, False, own)))
    opt_trace = _trace(adamw_step, (copy.copy(flat),), probe)
    graphs.append(Graph("AdamW step (a card's resident layers)", _rows(opt_trace, None, True,
                                                                       own)))
    return graphs


def render(model_name: str, graphs: list[Graph], version: str, probed: bool,
           unprobed_because: str | None = None) -> str:
    """The report as Markdown: one table per graph, then the verdict."""
    how = "compile-probed" if probed else "traced only, not compile-probed" + (
        f": {unprobed_because}" if unprobed_because else "")
    title = (f"Op report: one training step of {model_name} on furiosa-torch {version} "
             f"({how}, no card)")
    out = [title, ""]
    for graph in graphs:
        out += [f"{graph.name}:", "", "| op | part | count | card | gradient |",
                "| --- | --- | ---: | --- | --- |"]
        for r in graph.rows:
            card = r.status + (f": {r.why}" if r.why else "")
            out.append(f"| `{r.op}` | {r.part} | {r.count} | {card} | {r.grad} |")
        out.append("")
    bad = [(g.name, r) for g in graphs for r in g.failing()]
    if not bad:
        out.append("Every op of the step compiles for the card." if probed else
                   "Every op of the step was traced; none was compile-probed.")
    else:
        out.append("Cannot run on the card (so the step cannot run or cannot be "
                   "differentiated there): " + "; ".join(
                       f"{r.op} ({r.part}, {name})" for name, r in bad) + ".")
    return "\n".join(out)
