"""Optimizer pieces shared by the layer engine and the plain reference loop.

- AdamW (decoupled weight decay) with two parameter groups: matrices decay,
  norms and biases do not. torch's fused kernel wherever the device has one
  (cpu and cuda): on the host it runs at the memory-bandwidth limit.
- The learning-rate schedule: linear warm-up from lr/warmup to lr over the
  first ``warmup`` steps, then cosine decay to ``min_ratio * lr`` at the last
  step. ``--schedule constant`` keeps lr flat after warm-up.
- Gradient clipping by the global L2 norm over every trainable parameter,
  wherever it lives (host or any card): the norm's squares are summed per
  place and combined on the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

BETAS = (0.9, 0.95)
EPS = 1e-8


@dataclass(frozen=True)
class Schedule:
    lr: float
    steps: int
    warmup: int
    kind: str = "cosine"  # or "constant"
    min_ratio: float = 0.1

    def at(self, step: int) -> float:
        """Learning rate for 1-based ``step``."""
        if self.warmup > 0 and step <= self.warmup:
            return self.lr * step / self.warmup
        if self.kind == "constant" or self.steps <= self.warmup:
            return self.lr
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return self.lr * (self.min_ratio + (1.0 - self.min_ratio) * cosine)


def default_warmup(steps: int) -> int:
    return min(10, max(1, steps // 10))


def adamw(decay: list[torch.Tensor], no_decay: list[torch.Tensor], lr: float,
          weight_decay: float, fused: bool) -> torch.optim.AdamW | None:
    groups = [g for g in ({"params": decay, "weight_decay": weight_decay},
                          {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
    if not groups:
        return None
    kind = {"fused": True} if fused else {"foreach": False}
    return torch.optim.AdamW(groups, lr=lr, betas=BETAS, eps=EPS, **kind)


def set_lr(opt: torch.optim.Optimizer | None, lr: float) -> None:
    if opt is not None:
        for group in opt.param_groups:
            group["lr"] = lr


def sq_norm(grads: list[torch.Tensor]) -> torch.Tensor | None:
    """Sum of squares of ``grads`` as a 0-d tensor on their device (None when empty)."""
    if not grads:
        return None
    norms = torch._foreach_norm(grads, 2.0)
    return torch.stack(norms).double().pow(2).sum()


def clip_coef(total_norm: float, max_norm: float) -> float:
    """The factor clip_grad_norm_ would apply: at most 1."""
    if max_norm <= 0:
        return 1.0
    return min(1.0, max_norm / (total_norm + 1e-6))


def step(opt: torch.optim.AdamW | None, coef: float) -> None:
    """One AdamW step with every gradient multiplied by ``coef`` first."""
    if opt is None:
        return
    if coef < 1.0:
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if opt.defaults.get("fused"):
            # The fused kernel divides each gradient by grad_scale as it reads it:
            # clipping costs no extra pass over the gradients.
            opt.grad_scale = torch.tensor(1.0 / coef, device=grads[0].device)
        else:
            torch._foreach_mul_(grads, coef)
    opt.step()
    opt.grad_scale = None
