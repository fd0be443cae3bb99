"""The op report: one training step of a model as furiosa-torch would run it on an RNGD card.

Hardware-free, and built from the package's own tools as far as they go:

- The step is the one the furiosa backend runs: its modules and loss from
  trainer/backends/furiosa_modules.py (``index_select`` embedding, ``mm`` linears, softmax without
  ``dtype``, the loss without ``nll_loss``).
- Each distinct forward graph of the step is traced on the CPU by furiosa-torch's ``dryrun``
  (make_fx over real values; "a backend-agnostic operator tracing mechanism"); each ATen op
  in it is compiled the way the package's eager path compiles an op for a card (dryrun's node
  probe: ``AtenOp``, at the traced shapes, for a whole card: 8 PEs fused, as the trainer
  runs). The verdict: OK (compiles), FAIL (the package cannot compile it), ERROR (the probe
  broke), TIMEOUT (no verdict within the time limit), SKIP (not probed: trace-only, or not
  an ATen op).
- Gradients on a card come two ways. An op in the package's autograd registrations (2026.4)
  is differentiated by the package itself: when its input needs a gradient, its dispatcher
  builds the op's forward and backward graphs (``build_autograd_from_module``), and the
  report runs that very build at the traced shapes. Any other op falls to torch's derivative
  formula, whose backward ops must run on the card themselves: the report traces that
  formula for the op alone (dryrun again) and compiles each backward op it runs.
- Views (``VIEWS``) carry no gradient computation of their own.
- Every compile runs in a forked child with a time limit (``in_child``): the package's
  compiler can take many minutes at one shape, or panic; past the limit the child is killed
  and the op reported "timed out after N s". Each op and shape compiles once per report.

The graphs (trainer/backends/card_step.py): the rotary cos/sin table (no gradient flows into it);
the embedding; one decoder layer (every layer runs the same graph); the final norm, the head
and the loss; one AdamW step over a flat buffer (what a card runs for its resident layers).
"""

from __future__ import annotations

import collections
import shutil
import sys
import time
from dataclasses import dataclass, field

import torch
from torch.utils import _pytree as pytree

from trainer.backends import card_step
from trainer.backends.furiosa_torch import one_line
from trainer.backends.limits import in_child

#: Ops that only reshape or view: no kernel, autograd follows the view.
VIEWS = {"aten::view", "aten::reshape", "aten::t", "aten::transpose.int", "aten::unsqueeze",
         "aten::squeeze.dim", "aten::expand", "aten::slice.Tensor", "aten::narrow",
         "aten::permute", "aten::select.int", "aten::alias", "aten::detach",
         "aten::_unsafe_view", "aten::contiguous"}
WORST = ["HOST", "OK", "SKIP", "TIMEOUT", "ERROR", "FAIL"]  # a row's status: its worst node's
#: Seconds one compile may take before the report gives up on it (TIMEOUT). The package's
#: gradient build of one linear took 6 to 7 minutes on the loaded 2-core host.
COMPILE_LIMIT_S = 900.0
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
    status: str  # OK | FAIL | ERROR | TIMEOUT | SKIP: the op's compile for a card; HOST
    why: str = ""  # the package's reason, for FAIL and ERROR; the limit, for TIMEOUT
    grad: str = ""  # forward: "furiosa" | "torch formula" | "explicit" | "view" | "" (none)
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
        return [r for r in self.rows if r.verdict in ("FAIL", "ERROR", "TIMEOUT")
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


def _trace(fn, inputs):
    """``fn(*inputs)`` traced by dryrun, nothing compiled (each compile runs in a child)."""
    from furiosa.torch import dryrun

    return dryrun.dryrun(fn, *inputs, verbose=False, trace_only=True)


def _verdict(results) -> tuple[str, str]:
    """A group of (status, why) verdicts' status (the worst) and its reason."""
    status = max((r[0] for r in results), key=WORST.index)
    return status, next((r[1] for r in results if r[0] == status and r[1]), "")


def _examples(node):
    """The node's arguments as CPU tensors of the traced shapes, strides and dtypes."""
    def example(value):
        if isinstance(value, torch.fx.Node):
            value = value.meta["val"]
        if isinstance(value, torch.Tensor):  # the traced layout: strides matter to a compile
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype).zero_()
        return value

    return pytree.tree_map(example, (node.args, node.kwargs))


def _signature(node) -> tuple:
    """The node's op and its arguments' shapes, strides and dtypes: what a compile depends on."""
    def meta(value):
        if isinstance(value, torch.fx.Node):
            value = value.meta.get("val", value.name)
        if isinstance(value, torch.Tensor):
            return tuple(value.shape), value.stride(), value.dtype
        return value

    return str(node.target), repr(pytree.tree_map(meta, (node.args, node.kwargs)))


def _shapes(node) -> list:
    return [tuple(a.meta["val"].shape) for a in pytree.tree_leaves((node.args, node.kwargs))
            if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)]


def _limited(what: str, node, job, cache: dict, limit_s: float) -> tuple[str, str]:
    """One compile (``what`` of ``node``), cached by signature, in a child, with a progress
    line naming it and how long it took."""
    key = (what, *_signature(node))
    if key not in cache:
        t0 = time.perf_counter()
        cache[key] = in_child(job, limit_s)
        status, why = cache[key]
        print(f"op report: {what} {_norm(node.target)} {_shapes(node)}: {status} in "
              f"{time.perf_counter() - t0:.1f} s" + (f" ({why})" if why else ""),
              file=sys.stderr, flush=True)
    return cache[key]


def compile_node(traced, node, probe_id: int, cache: dict, limit_s: float) -> tuple[str, str]:
    """(status, why) of the package compiling ``node``'s op for a card at its traced shapes,
    as its eager path does (dryrun's node probe: ``AtenOp`` compiled)."""
    def job():
        from furiosa.torch import dryrun

        r = dryrun._probe_fx_node(node, traced.gm, probe_id, None)
        return r.status.name, one_line(r.exception) if r.exception else ""

    return _limited("compile", node, job, cache, limit_s)


def package_grad(node, cache: dict, limit_s: float) -> tuple[str, str]:
    """(status, why) of the package building ``node``'s op with its gradient, as its autograd
    dispatcher does in training: trace the op (or the package's own module for it) at the
    node's shapes, differentiate it, compile the forward and the backward graphs."""
    def job():
        from furiosa.torch._backend._autograd import build_autograd_from_module
        from furiosa.torch._custom_ops.autograd_ops import REGISTRATIONS
        from furiosa.torch._module.dfg import DfgModule
        from furiosa.torch._utils import to_fake_cpu_tensors
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        args, kwargs = _examples(node)
        impl = REGISTRATIONS[node.target]
        try:
            fake_args, fake_kwargs = to_fake_cpu_tensors((args, kwargs))
            module = impl(fake_args, fake_kwargs) if isinstance(impl, type) else (
                impl or node.target)
            with unset_fake_temporarily():
                dfg = DfgModule.from_module(module, args=fake_args, kwargs=fake_kwargs)
                build_autograd_from_module(dfg, name=node.target._name)
        except Exception as exc:  # noqa: BLE001 - the package's verdict, whatever it raised
            return "FAIL", one_line(exc)
        return "OK", ""

    return _limited("gradient build", node, job, cache, limit_s)


def formula_backward(node, probe: bool, caches: dict, limit_s: float) -> list[tuple]:
    """(op, status, why) of each backward op torch's formula runs for ``node``'s op alone (its
    gradient with respect to every floating-point input), traced by dryrun, each compiled."""
    args, kwargs = _examples(node)
    key = _signature(node)
    if key in caches["formula"]:
        return caches["formula"][key]
    wrt = [t for t in pytree.tree_leaves((args, kwargs))
           if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not wrt:  # nothing to differentiate with respect to
        caches["formula"][key] = []
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
    # What the op itself runs is taken out of its backward's trace.
    left = collections.Counter(r.report.target_name for r in _trace(forward, ()).reports)
    traced = _trace(backward, seeds)
    nodes = {n.name: n for n in traced.gm.graph.nodes}
    found = []
    for r in traced.reports:
        name = r.report.target_name
        if left[name] > 0:
            left[name] -= 1
        elif name.startswith("aten::"):
            verdict = (compile_node(traced, nodes[r.node_name], r.report.probe_id,
                                    caches["compile"], limit_s) if probe else ("SKIP", ""))
            found.append((name, *verdict))
    caches["formula"][key] = found
    return found


def _rows(traced, own_grad: set[str], part: str, grads: bool, probe: bool, caches: dict,
          limit_s: float, explicit: tuple = ()) -> list[OpRow]:
    """The rows of one traced graph. ``grads``: the graph's ops need their gradients on a
    card, so each gets the package's build or torch's formula's backward ops as rows; an op
    inside an autograd Function of the trainer's gets its Function's own backward, whose ops
    ``explicit`` lists as (label, function, example inputs) to trace."""
    nodes = {n.name: n for n in traced.gm.graph.nodes}
    by_op: dict[str, list] = collections.defaultdict(list)
    for r in traced.reports:
        if r.report.target_name.startswith("aten::"):
            by_op[r.report.target_name].append(r)
    rows, backward, sources = [], collections.defaultdict(list), collections.defaultdict(set)
    for op, found in by_op.items():
        verdicts = [("HOST", "") if part == "optimizer" and _on_host(nodes[r.node_name])
                    else compile_node(traced, nodes[r.node_name], r.report.probe_id,
                                      caches["compile"], limit_s) if probe else ("SKIP", "")
                    for r in found]
        row = OpRow(op, part, len(found), *_verdict(verdicts))
        rows.append(row)
        if not grads:
            continue
        wants = [nodes[r.node_name] for r in found if _wants_grad(nodes[r.node_name])]
        if not wants:
            if any(_inside_function(nodes[r.node_name]) for r in found):
                row.grad = "explicit"  # the Function's backward: its rows below
            continue
        row.grad = "view" if op in VIEWS else "furiosa" if op in own_grad else "torch formula"
        if row.grad == "furiosa" and probe:
            row.grad_status, row.grad_why = _verdict(
                [package_grad(n, caches["package"], limit_s) for n in wants])
        elif row.grad == "torch formula":
            for n in wants:
                for name, *verdict in formula_backward(n, probe, caches, limit_s):
                    backward[name].append(verdict)
                    sources[name].add(op)
    for label, fn, inputs in explicit if grads else ():
        bwd = _trace(fn, inputs)
        bwd_nodes = {n.name: n for n in bwd.gm.graph.nodes}
        for r in bwd.reports:
            if r.report.target_name.startswith("aten::"):
                backward[r.report.target_name].append(
                    compile_node(bwd, bwd_nodes[r.node_name], r.report.probe_id,
                                 caches["compile"], limit_s) if probe else ("SKIP", ""))
                sources[r.report.target_name].add(label)
    for op, verdicts in backward.items():
        rows.append(OpRow(op, "backward", len(verdicts), *_verdict(verdicts),
                          of=", ".join(sorted(sources[op]))))
    order = {"forward": 0, "backward": 1, "optimizer": 2}
    return sorted(rows, key=lambda r: (order[r.part], r.op))


def _on_host(node) -> bool:
    """An optimizer op on 0-dim tensors only: the step count, which torch's AdamW keeps on
    the host (neither capturable nor fused), so it never runs on the card."""
    inputs = [a.meta.get("val") for a in pytree.tree_leaves((node.args, node.kwargs))
              if isinstance(a, torch.fx.Node)]
    return bool(inputs) and all(isinstance(t, torch.Tensor) and t.dim() == 0 for t in inputs)


def _inside_function(node) -> bool:
    """Whether a node ran inside an autograd Function's forward (autograd off there): its
    output needs no gradient while an input does, or comes from such a node (the loss's
    chunks: a slice of the logits, then its log_softmax, ...). Its gradient is the Function's
    backward."""
    if _wants_grad(node):
        return False
    inside = node.meta.get("_inside_function")
    if inside is None:
        inputs = [a for a in pytree.tree_leaves((node.args, node.kwargs))
                  if isinstance(a, torch.fx.Node)]
        inside = any(_wants_grad(a) or _inside_function(a) for a in inputs)
        node.meta["_inside_function"] = inside
    return inside


def _wants_grad(node) -> bool:
    """Whether autograd recorded a forward node: its output needs a gradient."""
    meta = node.meta.get("tensor_meta")
    metas = [meta] if hasattr(meta, "requires_grad") else list(meta or ())
    return any(getattr(m, "requires_grad", False) for m in metas)


def new_caches() -> dict:
    """Verdicts by signature, so that each op and shape compiles once per report."""
    return {"compile": {}, "package": {}, "formula": {}}


def trace_graph(name: str, fn, inputs: tuple, probe: bool, own: set[str], caches: dict,
                grads: bool = True, part: str = "forward",
                limit_s: float = COMPILE_LIMIT_S, explicit: tuple = ()) -> Graph:
    """One graph's rows: ``fn(*inputs)`` runs its forward (under ``enable_grad`` where its
    gradients matter: that marks which ops need one)."""
    return Graph(name, _rows(_trace(fn, inputs), own, part, grads, probe, caches, limit_s,
                             explicit))


def step_graphs(model_name: str, seq_len: int = 32, probe: bool = True,
                limit_s: float = COMPILE_LIMIT_S, lora: int = 0) -> list[Graph]:
    """The op rows of each distinct graph of one training step of ``model_name`` (LoRA of rank
    ``lora`` if not 0); each compile (``probe``) in a child process given at most ``limit_s``
    seconds."""
    pieces = card_step.step_pieces(model_name, seq_len, lora)
    if probe:  # compile as the trainer does: for a whole card (8 PEs fused), its settings
        from trainer.backends.furiosa_torch import configure_compiler, fuse_cards

        fuse_cards()
        configure_compiler()
        torch.set_num_threads(1)  # the children are forked: no OpenMP pool across a fork
    own = differentiated_by_package()
    caches = new_caches()
    graphs = []
    for piece in pieces:
        graphs.append(trace_graph(piece.name, piece.fn, piece.inputs, probe, own, caches,
                                  piece.grads, piece.part, limit_s, piece.explicit))
        if probe:  # a probed report takes minutes (each op compiles): say where it is
            print(f"op report: {piece.name}: {len(graphs[-1].rows)} rows, "
                  f"{len(graphs[-1].failing())} cannot run", file=sys.stderr, flush=True)
    return graphs


def render(model_name: str, graphs: list[Graph], version: str, probed: bool,
           unprobed_because: str | None = None, limit_s: float = COMPILE_LIMIT_S) -> str:
    """The report as Markdown: one table per graph, then the verdict."""
    from trainer.backends.furiosa_torch import settings_text

    how = (f"compile-probed, {limit_s:g} s a compile at most, {settings_text()}" if probed
           else "traced only, not compile-probed" + (
               f": {unprobed_because}" if unprobed_because else ""))
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
        out.append("Cannot run on the card, or not known to within the time limit (so the "
                   "step cannot run or cannot be differentiated there): " + "; ".join(
                       f"{r.op} ({r.part}{', its gradient' if r.grad_status else ''}, {name}: "
                       f"{r.verdict})" for name, r in bad) + ".")
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
