"""Peak memory of the furiosa backend's loss, forward and backward, against the one-hot loss it
replaced and transformers' cross-entropy: on the host, in units of the logits' size.

A card has no peak-memory API (furiosa-torch 2026.4), so the loss runs here on the CPU with
torch's profiler recording every allocation and free; the peak is the most bytes alive at
once (the logits, which the engine holds through the backward anyway, and their gradient
included), divided by the logits' bytes. The arithmetic is the card's: the same ops, the same
temporaries. Run with .venv's python:

    OMP_NUM_THREADS=1 .venv/bin/python bench/furiosa_loss_memory.py --tokens 512 --vocab 32768
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import MemoryProfileTimeline

from trainer.backends import furiosa_modules


def one_hot_loss(logits, target, vocab, denominator):
    """The loss before chunking: log_softmax times the whole one-hot, under autograd."""
    logp = F.log_softmax(logits.to(torch.float32).reshape(-1, vocab), dim=-1)
    classes = torch.arange(vocab)
    one_hot = (target.unsqueeze(-1) == classes).to(logp.dtype)
    return -(logp * one_hot).sum() / denominator


def stock_loss(logits, target, vocab, denominator):
    """transformers' ForCausalLMLoss arithmetic: cross_entropy (log_softmax, nll_loss), summed."""
    return F.cross_entropy(logits.float().reshape(-1, vocab), target, ignore_index=-1,
                           reduction="sum") / denominator


def peak(loss_fn, logits, target, vocab) -> float:
    """Most bytes alive at once during loss_fn's forward and backward (torch's memory
    profile of the host: every tensor, the logits and their gradient included), in logits'
    sizes."""
    logits = logits.detach().requires_grad_(True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True) as prof:
        loss = loss_fn(logits, target, vocab, int((target >= 0).sum()))
        loss.backward()
        del loss
    _, sizes = MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline(
        torch.device("cpu"))
    return max(sum(row) for row in sizes) / (logits.numel() * logits.element_size())


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--chunk-rows", type=int, default=64)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    logits = torch.randn(args.tokens, args.vocab)
    target = torch.randint(0, args.vocab, (args.tokens,))
    target[: args.tokens // 8] = -1  # a prompt: not counted

    def chunked(logits, target, vocab, denominator):
        return furiosa_modules.loss_from_targets(logits, target, vocab, denominator,
                                                 chunk_rows=args.chunk_rows)

    mb = args.tokens * args.vocab * 4 / 2**20
    print(f"{args.tokens} tokens x {args.vocab} words, fp32 logits {mb:.0f} MB; chunks of "
          f"{args.chunk_rows} tokens ({args.chunk_rows / args.tokens:.3f} of the logits)")
    for name, fn in (("transformers' cross-entropy", stock_loss),
                     ("one-hot loss (before)", one_hot_loss), ("chunked loss (now)", chunked)):
        print(f"{name:<28} peak {peak(fn, logits, target, args.vocab):.2f} x the logits "
              "(the logits and their gradient included)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
