"""The plain whole-model loop: the reference the layer engine must match.

Same model, data, loss normalisation, AdamW groups, schedule and clipping as
the engine, written the ordinary way: ``model(**batch)``, ``loss.backward()``,
``clip_grad_norm_``, ``optimizer.step()``. Tests compare the engine's losses
with it; the all-resident benchmark compares step times with it.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from trainer import models
from trainer.data import packing
from trainer.data.batches import MicroBatch
from trainer.engine import optim


class PlainLoop:
    def __init__(self, model: nn.Module, device: torch.device, lr: float, weight_decay: float,
                 max_grad_norm: float, fused: bool = True):
        self.model = model.to(device)
        self.device = device
        self.max_grad_norm = max_grad_norm
        decay, no_decay = [], []
        for name, p in model.named_parameters():
            if p.requires_grad:
                (decay if models.decays(name, p) else no_decay).append(p)
        self.params = decay + no_decay
        self.opt = optim.adamw(decay, no_decay, lr, weight_decay, fused)

    def step(self, batches: list[MicroBatch], lr: float) -> tuple[float, float]:
        """One optimizer step; returns (loss, seconds)."""
        t0 = time.perf_counter()
        label_tokens = sum(mb.label_tokens for mb in batches)
        self.opt.zero_grad(set_to_none=True)
        total = None
        for mb in batches:
            out = self.model(input_ids=mb.input_ids.to(self.device),
                             labels=mb.labels.to(self.device), num_items_in_batch=label_tokens,
                             **self._attention(mb))
            out.loss.backward()
            total = out.loss.detach() if total is None else total + out.loss.detach()
        torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        optim.set_lr(self.opt, lr)
        self.opt.step()
        loss = float(total)
        return loss, time.perf_counter() - t0

    def _attention(self, mb: MicroBatch) -> dict:
        """The mask (and, packed, the positions) of ``mb`` as the model's forward takes them."""
        if mb.segments is None:
            return {"attention_mask": mb.attention_mask.to(self.device)}
        masks = {kind: m.to(self.device) for kind, m in
                 packing.attention_masks(mb, self.model.config, torch.float32).items()}
        # A model with sliding layers takes its masks by layer type; Llama takes the one.
        return {"position_ids": mb.position_ids.to(self.device),
                "attention_mask": masks if len(masks) > 1 else masks["full_attention"]}
