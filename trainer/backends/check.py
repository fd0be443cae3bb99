"""``trainer check``: one forward and backward on a backend against the CPU fp32 reference.

The reference is the plain whole-model forward and backward on the host in
fp32. The backend runs the layer engine on one card (0 resident layers by
default, so the upload and download paths are exercised too). Compared: the
logits, the loss, and each parameter's gradient of each layer, embedding and
head. The error of a quantity is its max absolute difference; the relative
error divides that by the reference's max absolute value. Exit 1 when any
relative error is over the tolerance.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import asdict, dataclass

import torch

from trainer import models
from trainer.backends import kinds
from trainer.data import batches
from trainer.engine.layer_engine import LayerEngine
from trainer.errors import BackendUnavailable, UsageError
from trainer.records import EXIT_ERROR, EXIT_OK

DEFAULT_RTOL = {"cpu": 1e-4, "cuda": 1e-4}  # a card (bf16 inside) gets 5e-2


@dataclass
class Row:
    name: str
    max_abs: float
    max_rel: float
    ok: bool


def compare(name: str, got: torch.Tensor, ref: torch.Tensor, rtol: float) -> Row:
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    diff = float((got - ref).abs().max()) if ref.numel() else 0.0
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    rel = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
    return Row(name, diff, rel, rel <= rtol)


def check(backend_spec: str, model_name: str, seq_len: int, resident: int, seed: int,
          rtol: float | None = None) -> tuple[list[Row], float]:
    cards = kinds.parse(backend_spec)
    if len(cards) != 1:
        raise UsageError("check takes one backend (one card)")
    backend = cards[0]
    if rtol is None:
        rtol = DEFAULT_RTOL.get(backend.kind, 5e-2)
    spec = models.resolve(model_name)
    vocab = None if spec.folder else batches.SYNTHETIC_VOCAB
    host = models.build(spec, vocab, seed)
    ref_model = copy.deepcopy(host)
    ids, labels = batches.synthetic(seq_len, min(host.config.vocab_size, batches.SYNTHETIC_VOCAB),
                                    seed, count=1)
    mb = batches.MicroBatch(ids, torch.ones_like(ids), labels)

    # Reference: the whole model at once on the host, fp32.
    out = ref_model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, labels=mb.labels,
                    num_items_in_batch=mb.label_tokens)
    out.loss.backward()

    # The backend: the layer engine on one card.
    engine = LayerEngine(host, [backend], resident, lr=1e-3, weight_decay=0.0, max_grad_norm=0.0)
    engine.keep_logits = True
    result = engine.step([mb], lr=0.0, update=False)

    rows = [compare("logits", engine.last_logits[0], out.logits, rtol),
            compare("loss", torch.tensor(result.loss), out.loss, rtol)]
    pieces = [("embed", engine.embed, ref_model.model.embed_tokens)]
    for s in engine.slots:
        pieces.append((f"layer {s.index}", s.module, ref_model.model.layers[s.index]))
    pieces.append(("norm", engine.norm, ref_model.model.norm))
    if not models.is_tied(host):
        pieces.append(("head", engine.head, ref_model.lm_head))
    for label, got_mod, ref_mod in pieces:
        got = dict(got_mod.named_parameters())
        worst = None
        for name, ref_p in ref_mod.named_parameters():
            if ref_p.grad is None:
                continue
            row = compare(f"grad {label}", got[name].grad, ref_p.grad, rtol)
            if worst is None or row.max_rel > worst.max_rel:
                worst = row
        if worst is not None:
            rows.append(worst)
    return rows, rtol


def run_check(backend_spec: str, model_name: str, seq_len: int, resident: int, seed: int,
              rtol: float | None, as_json: bool = False, ops: bool = False,
              probe: bool = True, compile_limit: float | None = None, lora: int = 0) -> int:
    """Compare the backend with CPU fp32; a furiosa backend without a card (or ``ops``) gives
    the hardware-free op report of one training step (of LoRA adapters of rank ``lora``, if
    not 0) instead."""
    furiosa = backend_spec.startswith("furiosa")
    if compile_limit is not None and compile_limit <= 0:
        raise UsageError("--compile-limit must be a positive number of seconds")
    if lora < 0:
        raise UsageError("--lora rank must be positive")
    if lora and not (furiosa and ops):
        raise UsageError("--lora is for the op report: give --backend furiosa:N --ops")
    if ops and not furiosa:
        raise UsageError("--ops reports what furiosa-torch would run: give --backend furiosa:N")
    if furiosa and ops:
        return run_op_report(model_name, seq_len, None, as_json, probe, compile_limit, lora)
    try:
        rows, rtol = check(backend_spec, model_name, seq_len, resident, seed, rtol)
    except BackendUnavailable as exc:
        from trainer.backends.furiosa_torch import NoCard

        if not isinstance(exc, NoCard):
            raise
        return run_op_report(model_name, seq_len, str(exc), as_json, probe, compile_limit)
    ok = all(r.ok for r in rows)
    if as_json:
        print(json.dumps({"backend": backend_spec, "rtol": rtol, "ok": ok,
                          "rows": [asdict(r) for r in rows]}))
    else:
        print(f"check {backend_spec} against cpu fp32 ({model_name}, seq {seq_len}, "
              f"relative tolerance {rtol:g})")
        print(f"{'quantity':<16} {'max abs err':>12} {'max rel err':>12}")
        for r in rows:
            print(f"{r.name:<16} {r.max_abs:>12.3e} {r.max_rel:>12.3e}{'' if r.ok else '  OVER'}")
        print("ok" if ok else "FAILED: over tolerance", file=sys.stdout if ok else sys.stderr)
    return EXIT_OK if ok else EXIT_ERROR


def run_op_report(model_name: str, seq_len: int, no_card: str | None, as_json: bool,
                  probe: bool, compile_limit: float | None = None, lora: int = 0) -> int:
    """The op report (trainer/backends/op_report.py): exit 0 when every op compiles for a
    card, else 1."""
    from trainer.backends import furiosa_torch, op_report

    unprobed = op_report.why_not_probed() if probe else None
    probe = probe and unprobed is None
    limit = compile_limit or op_report.COMPILE_LIMIT_S
    if probe:  # one linear's gradient build ran minutes (experiments/*-furiosa-op-report.md)
        print(f"op report: compiling every op of the step for a card, each given {limit:g} s "
              "at most, which takes minutes to hours (--trace-only: seconds)",
              file=sys.stderr, flush=True)
    graphs = op_report.step_graphs(model_name, seq_len, probe=probe, limit_s=limit, lora=lora)
    failing = [r for g in graphs for r in g.failing()]
    if as_json:
        print(json.dumps({"model": model_name, "lora": lora,
                          "furiosa_torch": furiosa_torch.version(),
                          "probed": probe, "not_probed_because": unprobed,
                          "compile_limit_s": limit if probe else None,
                          "no_card": no_card, "ok": not failing,
                          "graphs": [asdict(g) for g in graphs]}))
    else:
        if no_card:
            print(f"{no_card}: no card to compare, so the op report instead")
        name = f"{model_name} with LoRA adapters of rank {lora}" if lora else model_name
        print(op_report.render(name, graphs, furiosa_torch.version(), probe, unprobed, limit))
    return EXIT_OK if not failing else EXIT_ERROR
