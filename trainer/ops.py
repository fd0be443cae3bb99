"""The op report: one training step of a model as furiosa-torch would run it on an RNGD card.

Hardware-free, and built from the package's own tools as far as they go:

- Each distinct forward graph of the step is traced on the CPU by furiosa-torch's ``dryrun``
  (make_fx over real values; "a backend-agnostic operator tracing mechanism"), which also
  compile-probes every ATen op in it the way the package's eager path compiles an op for a
  card (``AtenOp``, at the traced shapes, for a whole card: 8 PEs fused, as the trainer runs).
  The verdict: OK (compiles), FAIL (the package cannot compile it), ERROR (the probe broke),
  SKIP (not probed: trace-only, or not an ATen op).
- Gradients on a card come two ways. An op in the package's autograd registrations (2026.4)
  is differentiated by the package itself: when its input needs a gradient, its dispatcher
  builds the op's forward and backward graphs (``build_autograd_from_module``), and the
  report runs that very build at the traced shapes. Any other op falls to torch's derivative
  formula, whose backward ops must run on the card themselves: the report traces that
  formula for the op alone (dryrun again) and probes each backward op it runs.
- Views (``VIEWS``) carry no gradient computation of their own.

The graphs: the rotary cos/sin table (no gradient flows into it); the embedding; one decoder
layer (every layer runs the same graph); the final norm, the head and the loss; one AdamW
step over a flat buffer (what a card runs for its resident layers).
"""

from __future__ import annotations

import collections
import copy
import shutil
import sys
from dataclasses import dataclass, field

import torch
from torch.utils import _pytree as pytree

from trainer import data, models
from trainer.furiosa_torch import IndexSelectEmbedding, one_line

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
    status: str  # OK | FAIL | ERROR | SKIP: the op's compile for a card
    why: str = ""  # the package's reason, for FAIL and ERROR
    grad: str = ""  # forward: "furiosa" | "torch formula" | "view" | "" (no gradient)
    grad_status: str = ""  # grad "furiosa": the package's forward+backward build of the op
    grad_why: str = ""
    of: str = ""  # backward: the forward ops whose torch formula runs it

    @property
    def verdict(self) -> str:
        """What training meets: an op the package differentiates runs as the package's own
        forward+backward build (its input needs a gradient), any other as its compile."""
        return self.grad_status or self.status


@dataclass
class Graph:
    name: str
    rows: list[OpRow] = field(default_factory=list)

    def failing(self, part: str | None = None) -> list[OpRow]:
        return [r for r in self.rows if r.verdict in ("FAIL", "ERROR")
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


def _verdict(reports) -> tuple[str, str]:
    """A group of probe reports' status (the worst) and the package's reason for it."""
    status = max((p.status.name for p in reports), key=WORST.index)
    bad = next((p for p in reports if p.status.name == status and p.exception), None)
    return status, one_line(bad.exception) if bad else ""


def _examples(node):
    """The node's arguments as CPU tensors of the traced shapes, strides and dtypes."""
    def example(value):
        if isinstance(value, torch.fx.Node):
            value = value.meta["val"]
        if isinstance(value, torch.Tensor):  # the traced layout: strides matter to a compile
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype).zero_()
        return value

    return pytree.tree_map(example, (node.args, node.kwargs))


def _signature(node, args, kwargs) -> tuple:
    shapes = pytree.tree_map(
        lambda t: (tuple(t.shape), t.stride(), t.dtype) if isinstance(t, torch.Tensor) else t,
        (args, kwargs))
    return str(node.target), repr(shapes)


def _package_grad(node, cache: dict) -> tuple[str, str]:
    """(status, why) of the package building ``node``'s op with its gradient, as its autograd
    dispatcher does in training: trace the op (or the package's own module for it) at the
    node's shapes, differentiate it, compile the forward and the backward graphs."""
    from furiosa.torch._backend._autograd import build_autograd_from_module
    from furiosa.torch._custom_ops.autograd_ops import REGISTRATIONS
    from furiosa.torch._module.dfg import DfgModule
    from furiosa.torch._utils import to_fake_cpu_tensors
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    args, kwargs = _examples(node)
    key = _signature(node, args, kwargs)
    if key not in cache:
        impl = REGISTRATIONS[node.target]
        try:
            fake_args, fake_kwargs = to_fake_cpu_tensors((args, kwargs))
            module = impl(fake_args, fake_kwargs) if isinstance(impl, type) else (
                impl or node.target)
            with unset_fake_temporarily():
                dfg = DfgModule.from_module(module, args=fake_args, kwargs=fake_kwargs)
                build_autograd_from_module(dfg, name=node.target._name)
            cache[key] = ("OK", "")
        except Exception as exc:  # noqa: BLE001 - the package's verdict, whatever it raised
            cache[key] = ("FAIL", one_line(exc))
    return cache[key]


def _formula_backward(node, probe: bool, cache: dict) -> list:
    """The probe reports of the backward ops torch's formula runs for ``node``'s op alone (its
    gradient with respect to every floating-point input), traced and probed by dryrun."""
    args, kwargs = _examples(node)
    key = _signature(node, args, kwargs)
    if key in cache:
        return cache[key]
    wrt = [t for t in pytree.tree_leaves((args, kwargs))
           if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not wrt:  # nothing to differentiate with respect to
        cache[key] = []
        return []

    def backward(*seeds):
        with torch.enable_grad():
            for t in wrt:
                t.requires_grad_(True)
            out = [t for t in pytree.tree_leaves(node.target(*args, **kwargs))
                   if isinstance(t, torch.Tensor) and t.requires_grad]
            return torch.autograd.grad(out, wrt, seeds[:len(out)], allow_unused=True)

    def forward():
        return node.target(*args, **kwargs)

    with torch.no_grad():
        outs = [t for t in pytree.tree_leaves(forward())
                if isinstance(t, torch.Tensor) and t.is_floating_point()]
    seeds = [torch.ones_like(t) for t in outs]
    # What the op itself runs (traced, not probed) is taken out of its backward's trace.
    left = collections.Counter(r.report.target_name for r in _trace(forward, (), False).reports)
    reports = []
    for r in _trace(backward, seeds, probe).reports:
        name = r.report.target_name
        if left[name] > 0:
            left[name] -= 1
        elif name.startswith("aten::"):
            reports.append(r.report)
    cache[key] = reports
    return reports


def _rows(traced, own_grad: set[str], part: str, grads: bool, probe: bool,
          caches: dict) -> list[OpRow]:
    """The rows of one traced graph. ``grads``: the graph's ops need their gradients on a
    card, so each gets the package's build or torch's formula's backward ops as rows."""
    nodes = {n.name: n for n in traced.gm.graph.nodes}
    by_op: dict[str, list] = collections.defaultdict(list)
    for r in traced.reports:
        if r.report.target_name.startswith("aten::"):
            by_op[r.report.target_name].append(r)
    rows, backward, sources = [], collections.defaultdict(list), collections.defaultdict(set)
    for op, found in by_op.items():
        row = OpRow(op, part, len(found), *_verdict([r.report for r in found]))
        rows.append(row)
        if not grads:
            continue
        wants = [nodes[r.node_name] for r in found if _wants_grad(nodes[r.node_name])]
        if not wants:
            continue
        row.grad = "view" if op in VIEWS else "furiosa" if op in own_grad else "torch formula"
        if row.grad == "furiosa" and probe:
            verdicts = [_package_grad(n, caches["package"]) for n in wants]
            row.grad_status = max((v[0] for v in verdicts), key=WORST.index)
            row.grad_why = next(v[1] for v in verdicts if v[0] == row.grad_status)
        elif row.grad == "torch formula":
            for n in wants:
                for report in _formula_backward(n, probe, caches["formula"]):
                    backward[report.target_name].append(report)
                    sources[report.target_name].add(op)
    for op, reports in backward.items():
        rows.append(OpRow(op, "backward", len(reports), *_verdict(reports),
                          of=", ".join(sorted(sources[op]))))
    order = {"forward": 0, "backward": 1, "optimizer": 2}
    return sorted(rows, key=lambda r: (order[r.part], r.op))


def _wants_grad(node) -> bool:
    """Whether autograd recorded a forward node: its output needs a gradient."""
    meta = node.meta.get("tensor_meta")
    metas = [meta] if hasattr(meta, "requires_grad") else list(meta or ())
    return any(getattr(m, "requires_grad", False) for m in metas)


def trace_graph(name: str, fn, inputs: tuple, probe: bool, own: set[str], caches: dict,
                grads: bool = True, part: str = "forward") -> Graph:
    """One graph's rows: ``fn(*inputs)`` runs its forward (under ``enable_grad`` where its
    gradients matter: that marks which ops need one)."""
    return Graph(name, _rows(_trace(fn, inputs, probe), own, part, grads, probe, caches))


def step_graphs(model_name: str, seq_len: int = 32, probe: bool = True) -> list[Graph]:
    """The op rows of each distinct graph of one training step of ``model_name``."""
    from transformers.masking_utils import create_causal_mask

    spec = models.resolve(model_name)
    model = models.build(spec, None if spec.folder else data.SYNTHETIC_VOCAB, seed=0)
    cfg, inner = model.config, model.model
    vocab = min(cfg.vocab_size, data.SYNTHETIC_VOCAB)
    ids, labels = data.synthetic(seq_len, vocab, 0, count=1)
    pos = torch.arange(seq_len)[None, :]
    h = torch.randn(1, seq_len, cfg.hidden_size)
    rope = inner.rotary_emb(h, position_ids=pos)
    mask = create_causal_mask(config=cfg, inputs_embeds=h,
                              attention_mask=torch.ones_like(ids), cache=None,
                              position_ids=pos)
    layer = inner.layers[0]
    embed = IndexSelectEmbedding(inner.embed_tokens)  # as the card runs it (FuriosaBackend)

    def embedding(ids):
        with torch.enable_grad():
            return embed(ids)

    def decoder_layer(x):
        with torch.enable_grad():  # the layer's input needs its gradient (the layer below's)
            x = x.requires_grad_(True)
            return layer(x, attention_mask=mask, position_ids=pos, position_embeddings=rope)

    def head_and_loss(x):
        with torch.enable_grad():
            x = x.requires_grad_(True)
            logits = model.lm_head(inner.norm(x))
            return model.loss_function(logits, labels, cfg.vocab_size,
                                       num_items_in_batch=seq_len)

    def rotary(x):
        return inner.rotary_emb(x, position_ids=pos)

    flat = torch.nn.Parameter(torch.randn(4096))
    flat.grad = torch.randn(4096)
    opt = torch.optim.AdamW([flat], lr=1e-3, foreach=False)
    opt.step()  # the state exists from the first step on: trace a later one

    def adamw_step(p):
        opt.step()
        return (p,)

    if probe:  # compile for what the trainer runs on: a whole card, its 8 PEs fused
        from trainer.furiosa_torch import fuse_cards

        fuse_cards()
    own = differentiated_by_package()
    caches: dict = {"package": {}, "formula": {}}
    graphs = []
    for name, fn, inputs, grads, part in (
            ("rotary cos/sin (once per micro-batch and card)", rotary, (h.clone(),), False,
             "forward"),
            ("embedding", embedding, (ids,), True, "forward"),
            ("decoder layer (every layer)", decoder_layer, (h.clone(),), True, "forward"),
            ("norm, head and loss", head_and_loss, (h.clone(),), True, "forward"),
            ("AdamW step (a card's resident layers)", adamw_step, (copy.copy(flat),), False,
             "optimizer")):
        graphs.append(trace_graph(name, fn, inputs, probe, own, caches, grads, part))
        if probe:  # a probed report takes minutes (each op compiles): say where it is
            print(f"op report: {name}: {len(graphs[-1].rows)} rows, "
                  f"{len(graphs[-1].failing())} cannot run", file=sys.stderr, flush=True)
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
            grad = (f"of {r.of}" if r.of else r.grad) + (
                f": {r.grad_status}" if r.grad_status else "") + (
                f": {r.grad_why}" if r.grad_why else "")
            out.append(f"| `{r.op}` | {r.part} | {r.count} | {_cell(card)} | {_cell(grad)} |")
        out.append("")
    bad = [(g.name, r) for g in graphs for r in g.failing()]
    if not bad:
        out.append("Every op of the step compiles for the card, with its gradient." if probed
                   else "Every op of the step was traced; none was compile-probed.")
    else:
        out.append("Cannot run on the card (so the step cannot run or cannot be "
                   "differentiated there): " + "; ".join(
                       f"{r.op} ({r.part}{', its gradient' if r.grad_status else ''}, {name})"
                       for name, r in bad) + ".")
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
