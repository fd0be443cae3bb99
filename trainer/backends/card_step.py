"""The distinct graphs of one training step as an RNGD card runs it, for the op report.

One decoder layer stands for every layer (each runs the same graph); the rotary table, the
embedding, the norm + head + loss and one AdamW step over a flat buffer are the others. The
model is built with the furiosa backend's modules and loss
(trainer/backends/furiosa_modules.py), and each graph lists the trainer's own written-out
backwards it runs (``MmLinear``'s, the LoRA products', the loss's), which autograd never
records: trainer/backends/op_report.py traces and compiles them as the graph's backward rows.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainer import models
from trainer.backends import furiosa_modules
from trainer.data import batches


def explicit_backwards(module: torch.nn.Module, rows: int) -> tuple:
    """(label, function, example inputs) of the backward of each ``MmLinear`` and of each
    LoRA adapter's two products (``MmLoRALinear``) in ``module``, for ``rows`` input rows:
    what the card runs for their gradients (a frozen weight gets none)."""
    def entry(label, out_features, in_features, weight):
        def backward(grad, x, w, want_weight=weight.requires_grad):
            return furiosa_modules.mm_backward(grad, x, w, True, want_weight)

        return (label, backward, (torch.randn(rows, out_features),
                                  torch.randn(rows, in_features),
                                  torch.randn(out_features, in_features)))

    found = []
    for m in module.modules():
        if isinstance(m, furiosa_modules.MmLinear):
            found.append(entry("MmLinear's own backward", m.out_features, m.in_features,
                               m.weight))
        elif isinstance(m, furiosa_modules.MmLoRALinear):
            rank, width = m.lora_a.shape
            found += [entry("the LoRA products' own backward", rank, width, m.lora_a),
                      entry("the LoRA products' own backward", m.lora_b.shape[0], rank,
                            m.lora_b)]
    return tuple(found)


def loss_backward(logits: torch.Tensor, target: torch.Tensor) -> tuple:
    """(label, function, example inputs) of the loss's own backward (``ChunkedCrossEntropy``)
    at these logits and targets, in the trainer's chunks: what the card runs for its
    gradient."""
    rows = furiosa_modules.loss_chunk_rows(logits.shape[-1])

    def backward(logits, target, scale):
        return furiosa_modules.chunked_loss_backward(logits, target, scale, rows)

    return ("the loss's own backward", backward, (logits, target, torch.tensor(1.0 / 32)))


@dataclass
class StepPiece:
    """One distinct graph of the training step as the card runs it: ``fn(*inputs)``."""

    key: str  # rotary | embedding | layer | head | adamw
    name: str
    fn: Callable
    inputs: tuple
    grads: bool  # its ops need their gradients
    part: str  # forward | optimizer
    explicit: tuple = ()  # the trainer's own backwards it runs (explicit_backwards)


def step_pieces(model_name: str, seq_len: int = 32, lora: int = 0) -> list[StepPiece]:
    """The distinct graphs of one training step of ``model_name`` (with LoRA adapters of rank
    ``lora``, if not 0), with the modules and the loss the furiosa backend runs
    (trainer/backends/furiosa_modules.py)."""
    from transformers.masking_utils import create_causal_mask

    spec = models.resolve(model_name)
    model = models.build(spec, None if spec.folder else batches.SYNTHETIC_VOCAB, seed=0)
    if lora:
        models.add_lora(model, lora)
    model = furiosa_modules.for_card(model)
    cfg, inner = model.config, model.model
    vocab = min(cfg.vocab_size, batches.SYNTHETIC_VOCAB)
    ids, labels = batches.synthetic(seq_len, vocab, 0, count=1)
    pos = torch.arange(seq_len)[None, :]
    h = torch.randn(1, seq_len, cfg.hidden_size)
    rope = inner.rotary_emb(h, position_ids=pos)
    mask = create_causal_mask(config=cfg, inputs_embeds=h,
                              attention_mask=torch.ones_like(ids), cache=None,
                              position_ids=pos)
    layer = inner.layers[0]

    def embedding(ids):
        with torch.enable_grad():
            return inner.embed_tokens(ids)

    def decoder_layer(x):
        with torch.enable_grad():  # the layer's input needs its gradient (the layer below's)
            x = x.requires_grad_(True)
            return layer(x, attention_mask=mask, position_ids=pos, position_embeddings=rope)

    target, _ = furiosa_modules.host_targets(labels)  # the labels' bookkeeping: on the host

    def head_and_loss(x):
        with torch.enable_grad():
            x = x.requires_grad_(True)
            logits = model.lm_head(inner.norm(x))
            return furiosa_modules.loss_from_targets(logits, target, cfg.vocab_size, seq_len)

    def rotary(x):
        return inner.rotary_emb(x, position_ids=pos)

    flat = torch.nn.Parameter(torch.randn(4096))
    flat.grad = torch.randn(4096)
    opt = torch.optim.AdamW([flat], lr=1e-3, foreach=False)
    opt.step()  # the state exists from the first step on: trace a later one

    def adamw_step(p):
        opt.step()
        return (p,)

    return [
        StepPiece("rotary", "rotary cos/sin (once per micro-batch and card)", rotary,
                  (h.clone(),), False, "forward"),
        StepPiece("embedding", "embedding", embedding, (ids,), True, "forward"),
        StepPiece("layer", "decoder layer (every layer)", decoder_layer, (h.clone(),), True,
                  "forward", explicit_backwards(layer, seq_len)),
        StepPiece("head", "norm, head and loss", head_and_loss, (h.clone(),), True, "forward",
                  explicit_backwards(model.lm_head, seq_len) + (loss_backward(
                      torch.randn(seq_len, cfg.vocab_size), target),)),
        StepPiece("adamw", "AdamW step (a card's resident layers)", adamw_step,
                  (copy.copy(flat),), False, "optimizer")]
