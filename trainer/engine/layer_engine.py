"""The layer engine: a causal LM trained layer by layer across cards and the host.

Placement: trainer/placement.py.

One optimizer step (``LayerEngine.step``), phases timed one after another
--------------------------------------------------------------------------
1. ``upload``: every offloaded layer's fp32 master goes host -> card, one copy
   per parameter group (at most two flat buffers per layer), once per step.
2. ``fwd_bwd``: gradients on the cards are zeroed, then for each micro-batch:
   forward through embed, every layer in order (activations move to the next
   card at a block boundary), norm, head and loss; backward through the head
   and every layer in reverse, one layer at a time (inputs are detached at
   every layer boundary, so this is the whole-model backward done piecewise).
   Gradients accumulate on the cards over the micro-batches.
3. ``download``: every offloaded layer's gradient goes card -> host, once per
   step, one copy per parameter group.
4. Clipping: each card sums the squares of its resident gradients (timed as
   ``device_optim``), the host those of the offloaded ones (``host_optim``);
   the host combines them into the global norm and the clip factor.
5. ``host_optim``: one fused AdamW step over the offloaded layers' flat
   masters on the host.
6. ``device_optim``: one AdamW step per card over its resident layers, embed,
   norm and head.
7. ``wait``: reading the step's loss back from the last card.

Each phase ends by synchronising the cards it used, so a phase's time is the
time its work took. What no phase claims (Python between phases) is small and
left unclaimed: the phases add up to ``step_s`` within a few percent.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from trainer import models
from trainer.backends.kinds import Backend
from trainer.data import packing
from trainer.data.batches import MicroBatch
from trainer.engine import optim
from trainer.errors import DeviceOutOfMemory, UsageError
from trainer.placement import Placement, _block  # noqa: F401 - _block: tests read it here
from trainer.records import PHASES

# Fault injection for tests of the out-of-memory path: "layer=N,phase=P"
# raises torch.OutOfMemoryError when the engine reaches that layer and phase.
INJECT_OOM_ENV = "RNGDCTL_TRAINER_INJECT_OOM"


# === Flat parameter storage ==================================================


def _split_groups(module: nn.Module) -> dict[str, list[nn.Parameter]]:
    groups: dict[str, list[nn.Parameter]] = {"decay": [], "no_decay": []}
    for name, p in module.named_parameters():
        if p.requires_grad:
            groups["decay" if models.decays(name, p) else "no_decay"].append(p)
    return {k: v for k, v in groups.items() if v}


def _flatten(params: list[nn.Parameter], device: torch.device,
             pin: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Move ``params`` into one flat buffer (and a flat gradient) on ``device``.

    Each parameter becomes a view into the buffer and its ``.grad`` a view into
    the gradient buffer, so a whole layer moves with one copy, and autograd
    accumulates into the flat gradient in place.
    """
    total = sum(p.numel() for p in params)
    flat = torch.empty(total, dtype=torch.float32, device=device, pin_memory=pin)
    grad = torch.zeros(total, dtype=torch.float32, device=device, pin_memory=pin)
    offset = 0
    for p in params:
        n = p.numel()
        flat[offset: offset + n].copy_(p.detach().reshape(-1))
        p.data = flat[offset: offset + n].view_as(p)
        p.grad = grad[offset: offset + n].view_as(p)
        offset += n
    return flat, grad


def _as_param(flat: torch.Tensor, grad: torch.Tensor) -> nn.Parameter:
    """An optimizer parameter sharing ``flat``'s storage, with ``grad`` as its gradient."""
    param = nn.Parameter(flat, requires_grad=True)
    param.grad = grad
    return param


@dataclass
class LayerSlot:
    """One decoder layer: its compute module on its card, and where its master lives."""

    index: int
    card: int
    resident: bool
    module: nn.Module  # runs on the card
    # On the card: flat weights and gradients per group (for a resident layer
    # these are the masters).
    dev_flat: dict[str, torch.Tensor] = field(default_factory=dict)
    dev_grad: dict[str, torch.Tensor] = field(default_factory=dict)
    # On the host (offloaded layers only): fp32 masters with their gradients,
    # as parameters of the host optimizer.
    host_master: dict[str, nn.Parameter] = field(default_factory=dict)
    run: Callable | None = None  # the module, compiled where the backend compiles


class _Head(nn.Module):
    """Final norm and head as one graph."""

    def __init__(self, norm: nn.Module, head: nn.Module):
        super().__init__()
        self.norm, self.head = norm, head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(x))


@dataclass
class StepResult:
    loss: float
    label_tokens: int
    tokens: int
    phases: dict[str, float]
    grad_norm: float


#: What torch's AdamW keeps per parameter, all of it in a checkpoint.
MOMENTS = ("exp_avg", "exp_avg_sq", "step")


# === The engine ==============================================================


class LayerEngine:
    """Holds a model spread over cards and host, and does optimizer steps on it."""

    def __init__(self, model: nn.Module, backends: list[Backend], resident_per_card: int,
                 lr: float, weight_decay: float, max_grad_norm: float,
                 checkpoint: bool = False):
        self.model = model
        self.config = model.config
        self.backends = backends
        self.max_grad_norm = max_grad_norm
        self.checkpoint = checkpoint
        self.where = "setup"
        self.keep_logits = False  # trainer check reads the logits back
        self.last_logits: list[torch.Tensor] = []
        self.placement = Placement.plan(models.num_layers(model), len(backends),
                                        resident_per_card, models.is_tied(model))
        self._inject = _parse_injection(os.environ.get(INJECT_OOM_ENV, ""))
        with self._guard("setup", None):
            self._place(lr, weight_decay)

    # --- setup ---------------------------------------------------------------

    def _place(self, lr: float, weight_decay: float) -> None:
        p, inner = self.placement, self.model.model
        first, head = self.backends[0], self.backends[p.head_card]
        # Pinned host buffers make card <-> host copies run at the link's speed.
        pin = any(b.kind == "cuda" for b in self.backends)
        # Each piece as its card runs it (the furiosa backend swaps in other ops, same
        # parameters: Backend.card_module).
        self.embed = first.card_module(inner.embed_tokens.to(first.device))
        self.norm = head.card_module(inner.norm.to(head.device))
        self.head = head.card_module(self.model.lm_head.to(head.device))
        self.loss_function = head.loss_function(self.model)
        # Rotary embeddings hold no parameters: one copy per card.
        self.rotary = [copy.deepcopy(inner.rotary_emb).to(b.device) for b in self.backends]

        # Per card and group: the parameters the card's own optimizer updates.
        dev_params = [{"decay": [], "no_decay": []} for _ in self.backends]
        #: Every optimizer parameter by a name that does not depend on where it lives, with
        #: its place (a card's index, or "host"): what a checkpoint holds (``state_tensors``).
        self.trainable: list[tuple[str, nn.Parameter, int | str]] = []
        self._edge_grads: list[torch.Tensor] = []
        for piece, module, card in (("embed", self.embed, 0), ("norm", self.norm, p.head_card),
                                    ("head", self.head, p.head_card)):
            names = {id(q): n for n, q in module.named_parameters()}
            for group, params in _split_groups(module).items():
                for q in params:
                    if any(q is o for o in dev_params[card][group]):
                        continue  # the tied head: one weight, one master
                    q.grad = torch.zeros_like(q)
                    dev_params[card][group].append(q)
                    self._edge_grads.append(q.grad)
                    self.trainable.append((f"{piece}.{names[id(q)]}", q, card))

        host_params = {"decay": [], "no_decay": []}
        self.slots: list[LayerSlot] = []
        for i, layer in enumerate(inner.layers):
            card = p.card_of_layer[i]
            dev = self.backends[card].device
            self.where = f"setup of layer {i} on card {card}"
            if p.resident[i]:
                # Resident: the flat buffers on the card are the masters, and
                # they are the card optimizer's parameters.
                module = self.backends[card].card_module(layer.to(dev))
                slot = LayerSlot(i, card, True, module)
                for group, params in _split_groups(module).items():
                    flat, grad = _flatten(params, dev)
                    slot.dev_flat[group], slot.dev_grad[group] = flat, grad
                    dev_params[card][group].append(_as_param(flat, grad))
                    self.trainable.append((f"layers.{i}.{group}", dev_params[card][group][-1],
                                           card))
            else:
                # Offloaded: the model's own layer, flattened in host memory, is
                # the master; the card gets a compute copy of the same shape.
                host_groups = _split_groups(layer)
                module = self.backends[card].card_module(copy.deepcopy(layer).to(dev))
                slot = LayerSlot(i, card, False, module)
                for group, params in host_groups.items():
                    flat, grad = _flatten(params, torch.device("cpu"), pin=pin)
                    slot.host_master[group] = _as_param(flat, grad)
                    host_params[group].append(slot.host_master[group])
                    self.trainable.append((f"layers.{i}.{group}", slot.host_master[group],
                                           "host"))
                for group, params in _split_groups(module).items():
                    slot.dev_flat[group], slot.dev_grad[group] = _flatten(params, dev)
            self.slots.append(slot)

        self.device_opts = [
            optim.adamw(dev_params[c]["decay"], dev_params[c]["no_decay"], lr, weight_decay,
                        b.fused_adamw)
            for c, b in enumerate(self.backends)]
        self.host_opt = optim.adamw(host_params["decay"], host_params["no_decay"], lr,
                                    weight_decay, fused=True)
        self._dev_grads = [[q.grad for g in (o.param_groups if o else []) for q in g["params"]]
                           for o in self.device_opts]
        self._host_grads = [q.grad for g in (self.host_opt.param_groups if self.host_opt else [])
                            for q in g["params"]]
        # What the cards run: compiled where the backend compiles (furiosa).
        for s in self.slots:
            s.run = self.backends[s.card].compile(s.module)
        self.head_run = head.compile(_Head(self.norm, self.head))
        self._sync_all()

    # --- one optimizer step --------------------------------------------------

    def step(self, batches: list[MicroBatch], lr: float, update: bool = True) -> StepResult:
        """One optimizer step over ``batches`` (the micro-batches of the step).

        With ``update=False`` only the gradients are made (upload, forward,
        backward, download): ``trainer check`` reads them.
        """
        phases = dict.fromkeys(PHASES, 0.0)
        offloaded = [s for s in self.slots if not s.resident]
        cards = range(len(self.backends))
        for b in self.backends:
            b.reset_peak()

        with self._phase(phases, "upload", cards):
            for s in offloaded:
                self._at(s.index, "upload")
                for group, master in s.host_master.items():
                    self.backends[s.card].upload(s.dev_flat[group], master.detach())

        label_tokens = sum(mb.label_tokens for mb in batches)
        with self._phase(phases, "fwd_bwd", cards):
            for s in self.slots:
                for g in s.dev_grad.values():
                    g.zero_()
            for g in self._edge_grads:
                g.zero_()
            loss_sum = None
            for mb in batches:
                part = self._forward_backward(mb, label_tokens)
                loss_sum = part if loss_sum is None else loss_sum + part

        with self._phase(phases, "download", cards):
            for s in offloaded:
                self._at(s.index, "download")
                for group, master in s.host_master.items():
                    master.grad.copy_(s.dev_grad[group])

        total = float("nan")
        if not update:
            return StepResult(float(loss_sum), label_tokens, sum(mb.tokens for mb in batches),
                              phases, total)
        with self._phase(phases, "device_optim", cards):
            self.where = "gradient norm on the cards"
            dev_sq = [optim.sq_norm(g) for g in self._dev_grads]
            dev_sq = [float(x) for x in dev_sq if x is not None]
        with self._phase(phases, "host_optim", ()):
            self.where = "gradient norm on the host"
            host_sq = optim.sq_norm(self._host_grads)
            total = (sum(dev_sq) + (float(host_sq) if host_sq is not None else 0.0)) ** 0.5
            coef = optim.clip_coef(total, self.max_grad_norm)
            self.where = "host optimizer"
            optim.set_lr(self.host_opt, lr)
            optim.step(self.host_opt, coef)
        with self._phase(phases, "device_optim", cards):
            for card, o in enumerate(self.device_opts):
                self.where = f"optimizer on card {card}"
                optim.set_lr(o, lr)
                optim.step(o, coef)

        with self._phase(phases, "wait", ()):
            self.where = "reading the loss"
            loss = float(loss_sum) if loss_sum is not None else float("nan")
        return StepResult(loss, label_tokens, sum(mb.tokens for mb in batches), phases, total)

    def _forward_backward(self, mb: MicroBatch, label_tokens: int) -> torch.Tensor:
        """Forward and backward of one micro-batch; returns its loss share (on the head card)."""
        loss, embedded, inputs, outputs, x_head = self._forward(mb, label_tokens)
        self.where = "backward of the head"
        loss.backward()

        grad = x_head.grad
        for s, x, out in zip(reversed(self.slots), reversed(inputs), reversed(outputs)):
            self._at(s.index, "backward")
            if callable(out):
                out = out()
            torch.autograd.backward(out, grad.to(out.device))
            grad = x.grad
        if embedded.requires_grad:  # a frozen embedding (LoRA) needs no backward
            self.where = "backward of the embedding"
            torch.autograd.backward(embedded, grad.to(embedded.device))
        return loss.detach()

    def _forward(self, mb: MicroBatch, label_tokens: int):
        """Forward of one micro-batch, layer by layer with detached boundaries.

        Returns (its loss share, the embedding's output, each layer's input and
        output (a recompute function with --checkpoint-layers), the head's input).
        """
        from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

        p, first = self.placement, self.backends[0]
        ids = first.to_device(mb.input_ids)
        # Packed rows (--pack): positions restart at each example, which attends to itself.
        pos = (first.to_device(mb.position_ids) if mb.position_ids is not None
               else torch.arange(ids.shape[1], device=first.device)[None, :])
        self.where = "forward of the embedding"
        embedded = self.embed(ids)
        packed = (packing.attention_masks(mb, self.config, embedded.dtype)
                  if mb.segments is not None else None)

        # Rotary (cos, sin) and the causal masks, once per card.
        ctx = []
        for c, b in enumerate(self.backends):
            h_c = embedded.detach().to(b.device)
            pos_c = pos.to(b.device)
            if packed is not None:  # made on the host, copied
                masks = {kind: m.to(b.device) for kind, m in packed.items()}
            else:
                am = mb.attention_mask.to(b.device)
                kw = {"config": self.config, "inputs_embeds": h_c, "attention_mask": am,
                      "cache": None, "position_ids": pos_c}
                masks = {"full_attention": create_causal_mask(**kw)}
                if getattr(self.model.model, "has_sliding_layers", False):
                    masks["sliding_attention"] = create_sliding_window_causal_mask(**kw)
            ctx.append((pos_c, masks, self.rotary[c](h_c, position_ids=pos_c)))

        layer_types = getattr(self.config, "layer_types", None)
        inputs, outputs = [], []
        h = embedded
        for s in self.slots:
            self._at(s.index, "forward")
            pos_c, masks, rope = ctx[s.card]
            x = h.detach().to(self.backends[s.card].device).requires_grad_(True)
            mask = masks[layer_types[s.index] if layer_types else "full_attention"]
            call = lambda x=x, s=s, mask=mask, pos_c=pos_c, rope=rope: s.run(
                x, attention_mask=mask, position_ids=pos_c, position_embeddings=rope)
            if self.checkpoint:
                with torch.no_grad():
                    out = call()
                outputs.append(call)  # recomputed with grad in the backward
            else:
                out = call()
                outputs.append(out)
            inputs.append(x)
            h = out

        self.where = "forward of the head"
        head_dev = self.backends[p.head_card].device
        x_head = h.detach().to(head_dev).requires_grad_(True)
        logits = self.head_run(x_head)
        if self.keep_logits:
            self.last_logits.append(logits.detach())
        # The labels go as they are, on the host: the loss moves what it needs to the card
        # (transformers' after its shift; the furiosa backend's after its bookkeeping).
        loss = self.loss_function(logits, mb.labels, self.config.vocab_size,
                                  num_items_in_batch=label_tokens)
        return loss, embedded, inputs, outputs, x_head

    # --- the held-out loss ---------------------------------------------------

    def evaluate(self, batches: Iterable[MicroBatch],
                 label_tokens: int | None = None) -> tuple[float, int]:
        """(mean loss over ``batches``' label tokens, those tokens): forward only, no update.

        The same path as a step's forward, on the same cards: the offloaded
        layers' compute copies get the masters first (a step uploads them at its
        start, so after an update they are one step old). ``label_tokens``: their
        count, given when ``batches`` is a stream read once.
        """
        if label_tokens is None:
            label_tokens = sum(mb.label_tokens for mb in batches)
        cards = range(len(self.backends))
        with torch.no_grad(), self._guard("eval", cards):
            for s in self.slots:
                if not s.resident:
                    self._at(s.index, "upload")
                    for group, master in s.host_master.items():
                        self.backends[s.card].upload(s.dev_flat[group], master.detach())
            total = None
            for mb in batches:
                part = self._forward(mb, label_tokens)[0].detach()
                total = part if total is None else total + part
            self._sync_all()
        return (float(total) if total is not None else float("nan")), label_tokens

    # --- bookkeeping ---------------------------------------------------------

    def _at(self, layer: int, phase: str) -> None:
        """Mark where the engine is (for an out-of-memory message).

        SIGTERM is not honoured here: a step, once begun, finishes, so that the
        trainer can write a checkpoint after it (trainer/train.py).
        """
        self.where = f"{phase} of layer {layer} on card {self.placement.card_of_layer[layer]}"
        if self._inject == (layer, phase):
            raise torch.OutOfMemoryError(f"injected by {INJECT_OOM_ENV}")

    @contextmanager
    def _phase(self, phases: dict, name: str, cards):
        t0 = time.perf_counter()
        with self._guard(name, cards):
            yield
            for c in cards:
                self.backends[c].synchronize()
        phases[name] += time.perf_counter() - t0

    @contextmanager
    def _guard(self, name: str, cards):
        try:
            yield
        except UsageError:
            raise
        except (RuntimeError, MemoryError) as exc:
            if any(b.is_oom(exc) for b in self.backends):
                raise DeviceOutOfMemory(self.where, str(exc).strip().splitlines()[0]
                                        if str(exc).strip() else type(exc).__name__) from exc
            raise

    def _sync_all(self) -> None:
        for b in self.backends:
            b.synchronize()

    def device_peaks_gb(self) -> list[float] | None:
        peaks = [b.peak_gb() for b in self.backends]
        return None if any(x is None for x in peaks) else [round(x, 4) for x in peaks]

    # --- the state a checkpoint holds -----------------------------------------

    def _optimizer(self, place: int | str) -> torch.optim.Optimizer:
        return self.host_opt if place == "host" else self.device_opts[place]

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Every master and its AdamW state, where they live, by names that do not depend
        on the placement (``layers.3.decay.master``, ``embed.weight.exp_avg``, ...)."""
        out = {}
        for name, param, place in self.trainable:
            out[f"{name}.master"] = param.detach()
            state = self._optimizer(place).state.get(param, {})
            for key in MOMENTS:
                if key in state:
                    out[f"{name}.{key}"] = state[key]
        return out

    def state_layout(self, moments: bool) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """The (shape, dtype) of each tensor ``state_tensors`` gives once a step has run
        (``moments``) or before."""
        return _with_moments({name: (tuple(param.shape), param.dtype)
                              for name, param, _ in self.trainable}, moments)

    def load_state(self, fetch: Callable[[str], torch.Tensor], moments: bool) -> None:
        """Masters (and AdamW state) from a checkpoint's tensors, one at a time, in place.

        The caller has checked the layout (``state_layout``) first: nothing
        here can fail half-way on a tensor of the wrong shape.
        """
        for name, param, place in self.trainable:
            param.detach().copy_(fetch(f"{name}.master"))
            if moments:
                self._optimizer(place).state[param] = {
                    key: fetch(f"{name}.{key}").to(param.device).clone() for key in MOMENTS}
        self._sync_all()

    # --- reading the model back ----------------------------------------------

    def master_state(self) -> dict[str, torch.Tensor]:
        """The fp32 master weights, by the model's parameter names, on the host."""
        state = {}
        for name, q in self.model.named_parameters():
            state[name] = q.detach().to("cpu").clone()
        return state

    def layer_grads(self) -> list[torch.Tensor]:
        """Each layer's full gradient (flat, host), as the last step left it, before clipping."""
        out = []
        for s in self.slots:
            parts = [s.dev_grad[g].to("cpu") for g in ("decay", "no_decay") if g in s.dev_grad]
            out.append(torch.cat(parts) if parts else torch.zeros(0))
        return out


def state_layout_of(model: nn.Module, moments: bool) -> dict[str, tuple[tuple[int, ...],
                                                                         torch.dtype]]:
    """What ``state_layout`` of an engine of ``model`` gives, without building the engine:
    a model on the meta device will do, so a checkpoint is checked against it before any
    engine exists. The names are ``_place``'s: embed, norm and head by parameter (a tied
    head once), each layer by group, as one flat buffer."""
    inner, masters, seen = model.model, {}, []
    for piece, module in (("embed", inner.embed_tokens), ("norm", inner.norm),
                          ("head", model.lm_head)):
        names = {id(q): n for n, q in module.named_parameters()}
        for params in _split_groups(module).values():
            for q in params:
                if not any(q is o for o in seen):
                    seen.append(q)
                    masters[f"{piece}.{names[id(q)]}"] = (tuple(q.shape), q.dtype)
    for i, layer in enumerate(inner.layers):
        for group, params in _split_groups(layer).items():
            masters[f"layers.{i}.{group}"] = ((sum(q.numel() for q in params),), torch.float32)
    return _with_moments(masters, moments)


def _with_moments(masters: dict, moments: bool) -> dict:
    """Each master's layout (``NAME.master``), and with ``moments`` its AdamW state's."""
    out = {}
    for name, layout in masters.items():
        out[f"{name}.master"] = layout
        if moments:
            out[f"{name}.exp_avg"] = out[f"{name}.exp_avg_sq"] = layout
            out[f"{name}.step"] = ((), torch.float32)
    return out


def _parse_injection(text: str) -> tuple[int, str] | None:
    if not text:
        return None
    fields = dict(kv.split("=", 1) for kv in text.split(",") if "=" in kv)
    return int(fields.get("layer", 0)), fields.get("phase", "forward")
