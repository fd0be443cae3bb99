"""The training step as an RNGD card runs it: the same arithmetic, from ops furiosa-torch 2026.4
compiles and differentiates.

furiosa-torch 2026.4.0 cannot differentiate the step as transformers writes it (the op report,
docs/design.md): torch's ``embedding_backward`` does not compile; its gradient build of
``linear`` (and of ``mm``) panics in its compiler at the q_proj, o_proj and MLP shapes; its
export refuses the ``dtype`` argument of transformers' ``softmax(x, dim, dtype=float32)``;
and ``nll_loss_backward``, the cross-entropy's gradient, does not compile. The card runs
instead:

- ``nn.Embedding`` as ``index_select`` of the same weight (``IndexSelectEmbedding``);
- ``nn.Linear`` as ``mm`` of the flattened rows with the transposed weight, plus the bias,
  its gradient written out as two more ``mm`` (``MmLinear``): the package compiles plain
  ``mm`` at every shape of the step, while its own gradient build of ``mm`` panics as
  ``linear``'s does;
- the attention's softmax without ``dtype`` (``eager_attention``, registered with
  transformers as ``furiosa_eager`` and named by each attention module's own config copy);
- the causal-LM loss as ``log_softmax`` times the labels' one-hot rows, summed
  (``causal_lm_loss``), no ``nll_loss``, a chunk of tokens at a time with its gradient
  written out (``ChunkedCrossEntropy``: no logits-sized one-hot); the labels' shift on the
  host.

``for_card`` swaps them into a model or one piece of it; the parameters stay the same objects
under the same names (masters, checkpoints, the tied head and ``trainer check`` see no
difference). Only ``FuriosaBackend`` calls it: cpu and cuda keep transformers' modules. On the
CPU both give the same loss and gradients up to fp32 summation order
(tests/trainer/test_furiosa_modules.py).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from trainer.errors import UsageError

#: The attention implementation name the card's attention modules carry in their config.
ATTENTION = "furiosa_eager"


class IndexSelectEmbedding(nn.Module):
    """``nn.Embedding`` as the card runs it: the same rows by ``index_select``, the same weight
    (shared, so masters and the tied head see one parameter). ``index_select`` is one of the
    ops the package differentiates itself, and its build compiles. The padding row gets no
    gradient, as ``nn.Embedding`` gives it none."""

    def __init__(self, embed: nn.Embedding):
        super().__init__()
        if embed.max_norm is not None or embed.scale_grad_by_freq or embed.sparse:
            raise UsageError("the furiosa backend runs the embedding as index_select, which "
                             "has no max_norm, scale_grad_by_freq or sparse gradient")
        self.weight = embed.weight
        self.padding_idx = embed.padding_idx

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.weight.index_select(0, ids.reshape(-1)).reshape(*ids.shape, -1)
        if self.padding_idx is None:
            return rows
        return torch.where((ids == self.padding_idx).unsqueeze(-1), rows.detach(), rows)


class MmLinear(nn.Module):
    """``nn.Linear`` as ``mm`` of the input's rows (flattened to 2-D) with the transposed
    weight, plus the bias: the same parameters, the same products and sums. Its gradient is
    written out (``MmWithGradient``), so that the card runs it as plain ``mm``."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.register_parameter("bias", linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = MmWithGradient.apply(x.reshape(-1, self.in_features), self.weight)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


class MmLoRALinear(nn.Module):
    """A LoRA adapter (``models.LoRALinear``: ``base(x) + scale * x A^T B^T``) as the card runs
    it: the frozen base as ``MmLinear``, the adapter's two products as ``mm`` with their
    gradient written out (``MmWithGradient``), not ``matmul``, whose gradient build is the
    package's ``linear`` one. The same parameters under the same names."""

    def __init__(self, lora: nn.Module):
        super().__init__()
        self.base = _swap(lora.base) or lora.base
        self.lora_a, self.lora_b, self.scale = lora.lora_a, lora.lora_b, lora.scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low = MmWithGradient.apply(x.reshape(-1, x.shape[-1]), self.lora_a)
        up = MmWithGradient.apply(low, self.lora_b)
        return self.base(x) + up.reshape(*x.shape[:-1], -1) * self.scale


class MmWithGradient(torch.autograd.Function):
    """``mm(x, weight.t())`` whose gradient is two more ``mm`` (``mm_backward``), not the
    package's gradient build of ``mm``, which panics in its compiler at most of the step's
    shapes (the op report). Autograd is off inside a Function's forward and backward, so on
    the card each ``mm`` here takes the package's plain eager path: a forward compile."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return torch.mm(x, weight.t())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        return mm_backward(grad, x, weight, *ctx.needs_input_grad)


def mm_backward(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                want_x: bool = True, want_weight: bool = True):
    """The gradients of ``mm(x, weight.t())``: ``grad @ weight`` and ``grad.t() @ x``."""
    return (torch.mm(grad, weight) if want_x else None,
            torch.mm(grad.t(), x) if want_weight else None)


def eager_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, attention_mask: torch.Tensor | None, scaling: float,
                    dropout: float = 0.0, **kwargs):
    """transformers' eager attention (Llama's and Qwen2's are the same function) with its
    softmax in fp32 by a cast before it instead of softmax's ``dtype`` argument."""
    from transformers.models.llama.modeling_llama import repeat_kv

    keys = repeat_kv(key, module.num_key_value_groups)
    values = repeat_kv(value, module.num_key_value_groups)
    weights = torch.matmul(query, keys.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = F.softmax(weights.to(torch.float32), dim=-1).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    out = torch.matmul(weights, values).transpose(1, 2).contiguous()
    return out, weights


def _register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, eager_attention)


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                   num_items_in_batch: int | torch.Tensor | None = None,
                   ignore_index: int = -100, shift_labels: torch.Tensor | None = None,
                   **_) -> torch.Tensor:
    """transformers' ``ForCausalLMLoss`` (shift, cross-entropy summed over the labelled tokens,
    divided by ``num_items_in_batch``, else their mean) without ``nll_loss``: the labels'
    bookkeeping on the host (``host_targets``), then ``loss_from_targets`` on the card."""
    target, labelled = host_targets(labels, ignore_index, shift_labels)
    if num_items_in_batch is None:
        num_items_in_batch = labelled
    return loss_from_targets(logits, target, vocab_size, num_items_in_batch)


def host_targets(labels: torch.Tensor, ignore_index: int = -100,
                 shift_labels: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """Each position's next token (-1 where none counts), flat, on the host, in fp32, and how
    many count. 2026.4 cannot compile ``pad`` of the int labels for a card (the op report),
    nor, at some shapes, a cast or an ``eq`` of int64 ids (bench/furiosa_loss_compile.py), and
    the labels come from the host anyway: the card gets the ids as fp32, exact below 2^24."""
    if shift_labels is None:  # tokens < n predict n
        shift_labels = F.pad(labels.cpu(), (0, 1), value=ignore_index)[..., 1:]
    target = shift_labels.cpu().reshape(-1)
    target = torch.where(target == ignore_index, -1, target)
    return target.to(torch.float32), int((target >= 0).sum())


#: Elements (tokens x vocabulary) of one chunk of the loss: its one-hot rows and its other
#: temporaries are this size, not the logits' (64 MB a temporary in fp32; 130 tokens of
#: Llama-3.1's 128,256 words).
LOSS_CHUNK_ELEMENTS = 1 << 24


#: Word ids travel to the card as fp32 (host_targets), which holds every integer up to 2^24.
MAX_EXACT_ID = 1 << 24


def loss_chunk_rows(vocab_size: int) -> int:
    """Tokens per chunk of the loss at this vocabulary: ``LOSS_CHUNK_ELEMENTS`` at most."""
    return max(1, LOSS_CHUNK_ELEMENTS // vocab_size)


def loss_from_targets(logits: torch.Tensor, target: torch.Tensor, vocab_size: int,
                      denominator: int | torch.Tensor,
                      chunk_rows: int | None = None) -> torch.Tensor:
    """The summed cross-entropy over ``denominator``, as the card computes it, a chunk of
    tokens at a time (``ChunkedCrossEntropy``): no logits-sized one-hot, nor log-probabilities,
    is ever made or kept for the backward."""
    if vocab_size > MAX_EXACT_ID:
        raise UsageError(f"the furiosa backend's loss compares word ids in fp32, exact up to "
                         f"{MAX_EXACT_ID:,} words; this vocabulary has {vocab_size:,}")
    rows = chunk_rows or loss_chunk_rows(vocab_size)
    return ChunkedCrossEntropy.apply(logits.reshape(-1, vocab_size),
                                     target.to(torch.float32).to(logits.device), denominator,
                                     rows)


class ChunkedCrossEntropy(torch.autograd.Function):
    """The cross-entropy of ``logits`` [N, V] against ``target`` [N] (-1: not counted),
    summed and divided by ``denominator``, with its gradient written out, both a chunk of
    ``rows`` tokens at a time.

    Under autograd each chunk's ``mul`` by its one-hot rows would keep those rows for the
    backward (and ``log_softmax`` its output): chunks or not, a logits-sized one-hot and a
    logits-sized table of log-probabilities would stay on the card until the backward. Here
    the forward keeps only the logits (which the engine holds anyway) and the targets; the
    backward makes the gradient, ``(softmax - one_hot) * counted * g / denominator``, chunk by
    chunk into one logits-sized tensor (``copy_`` into its rows, as the package's own
    ``slice_scatter`` writes a slice). Autograd is off inside a Function, so on the card each op
    here compiles as a plain forward op (the op report's ``explicit`` rows)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor,
                denominator: int | torch.Tensor, rows: int) -> torch.Tensor:
        ctx.save_for_backward(logits, target)
        ctx.denominator, ctx.rows = denominator, rows
        total = chunked_loss_sum(logits, target, rows)
        if torch.is_tensor(denominator):
            denominator = denominator.to(total.device)
        return total / denominator

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, target = ctx.saved_tensors
        denominator = ctx.denominator
        if torch.is_tensor(denominator):
            denominator = denominator.to(grad.device)
        return chunked_loss_backward(logits, target, grad / denominator, ctx.rows), \
            None, None, None


def chunked_loss_sum(logits: torch.Tensor, target: torch.Tensor, rows: int) -> torch.Tensor:
    """-sum of each counted token's log-probability of its target, ``rows`` tokens at a time:
    ``log_softmax`` times the chunk's one-hot rows (none where the target is -1), summed by
    row, then over the rows. 2026.4's gradient build of ``index_select`` fails for a flat
    table, and ``nll_loss_backward`` does not compile; no gradient is built here
    (``ChunkedCrossEntropy``). At Llama-3.1's vocabulary a chunk's sum straight to a scalar
    does not compile, nor does ``eq`` of the int64 targets against the classes: by row, and in
    fp32 (exact: word ids are below 2^24), both do (docs/design.md)."""
    classes, targets = _one_hot_operands(logits, target)
    total = None
    for start in range(0, logits.shape[0], rows):
        logp = F.log_softmax(logits[start:start + rows].to(torch.float32), dim=-1)
        one_hot = (targets[start:start + rows].unsqueeze(-1) == classes).to(logp.dtype)
        part = (logp * one_hot).sum(dim=-1).sum()
        total = part if total is None else total + part
    return -total


def chunked_loss_backward(logits: torch.Tensor, target: torch.Tensor, scale: torch.Tensor,
                          rows: int) -> torch.Tensor:
    """The gradient of ``scale * chunked_loss_sum`` with respect to the logits:
    ``(softmax - one_hot) * scale`` on counted tokens, zero on the others, ``rows`` tokens at
    a time into one tensor of the logits' shape and dtype."""
    classes, targets = _one_hot_operands(logits, target)
    out = torch.empty_like(logits)
    for start in range(0, logits.shape[0], rows):
        probs = F.softmax(logits[start:start + rows].to(torch.float32), dim=-1)
        chunk = targets[start:start + rows].unsqueeze(-1)
        one_hot = (chunk == classes).to(probs.dtype)
        counted = (chunk >= 0).to(probs.dtype)
        out[start:start + rows].copy_((probs * counted - one_hot) * scale)
    return out


def _one_hot_operands(logits: torch.Tensor, target: torch.Tensor):
    """The word ids and the targets in fp32, what the one-hot rows compare (-1 matches none)."""
    return (torch.arange(logits.shape[-1], device=logits.device, dtype=torch.float32),
            target.to(torch.float32))


def _is_attention(module: nn.Module) -> bool:
    from transformers.models.llama.modeling_llama import LlamaAttention
    from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention

    return isinstance(module, (LlamaAttention, Qwen2Attention))


def for_card(module: nn.Module) -> nn.Module:
    """``module`` (a model, a decoder layer, the embedding or the head) as the card runs it:
    its embeddings and linears swapped in place for the modules above, its attention modules
    given a config of their own naming ``eager_attention``. Returns the module, or its
    replacement when it is itself an embedding or a linear."""
    swapped = _swap(module)
    if swapped is not None:
        return swapped
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            swapped = _swap(child)
            if swapped is not None:
                setattr(parent, name, swapped)
        if _is_attention(parent) and parent.config._attn_implementation != ATTENTION:
            _register_attention()
            parent.config = copy.copy(parent.config)  # the model's own keeps its attention
            parent.config._attn_implementation = ATTENTION
    return module


def _swap(module: nn.Module) -> nn.Module | None:
    from trainer.models import LoRALinear

    if isinstance(module, LoRALinear):
        return MmLoRALinear(module)
    if isinstance(module, nn.Embedding):
        return IndexSelectEmbedding(module)
    if type(module) is nn.Linear:  # not a subclass that computes something else
        return MmLinear(module)
    return None
