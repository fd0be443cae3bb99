"""``--pack``: rows of ``--seq-len`` filled with several examples, each seeing only itself.

Without it every example is a row of its own, padded to ``--seq-len``: on the NSMC sample
at 512 most of each row is padding. Packed, a row holds examples end to end, and the
micro-batch says where each begins (``MicroBatch.position_ids``, ``segments``):

- the rotary positions restart at 0 for each example;
- attention stays within each example: a block-diagonal causal mask (``attention_masks``,
  the model's own mask functions with "same example" as a further condition, so a sliding
  window still applies), made on the host and copied to each card;
- an example's first token carries no loss (the token before it is another example's).

So a packed row computes what its examples would alone: the same losses and gradients, to
fp32's rounding (tested), and rows stay ``--seq-len`` long (static shapes for a card).

**Which examples share a row** (``pack``). **Chosen**: best fit, longest first: each example
goes to the row whose free room fits it most tightly, a new row when none does. It is
deterministic (ties by the example's place), leaves a row's free room below the shortest
example left, and takes O(n log n) for n examples. The rows, not the examples, are then
drawn in the seed's order each epoch (``batches.Batches``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch

from trainer.data.batches import Encoded, MicroBatch


@dataclass(frozen=True)
class Packed:
    """Encoded examples, several to a row: row ``r`` holds the examples
    ``members[bounds[r]:bounds[r + 1]]``, in that order, then padding."""

    examples: Encoded
    members: torch.Tensor  # [M] int64
    bounds: torch.Tensor  # [R + 1] int64

    def __len__(self) -> int:
        return self.bounds.shape[0] - 1

    @property
    def seq_len(self) -> int:
        return self.examples.seq_len

    @property
    def label_tokens(self) -> int:
        """Tokens that carry loss: each example's, its first excluded, as when alone."""
        return self.examples.label_tokens

    @property
    def real_tokens(self) -> int:
        return self.examples.real_tokens

    def micro_batch(self, rows: torch.Tensor, no_loss: int = 0) -> MicroBatch:
        """These packed rows as a micro-batch; its last ``no_loss`` rows carry no loss."""
        size, seq_len = len(rows), self.seq_len
        ids = torch.full((size, seq_len), self.examples.pad_id, dtype=torch.long)
        labels = torch.full((size, seq_len), -100, dtype=torch.long)
        positions = torch.zeros((size, seq_len), dtype=torch.long)
        segments = torch.zeros((size, seq_len), dtype=torch.long)
        real = 0
        for i, r in enumerate(rows.tolist()):
            at = 0
            members = self.members[self.bounds[r]: self.bounds[r + 1]].tolist()
            for k, m in enumerate(members, 1):
                row, lab = self.examples.row(m)
                n = len(row)
                ids[i, at: at + n] = row
                labels[i, at + 1: at + n] = lab[1:]
                positions[i, at: at + n] = torch.arange(n)
                segments[i, at: at + n] = k
                at += n
            # The padding after the last example: positions of its own, attending to itself.
            positions[i, at:] = torch.arange(seq_len - at)
            real += at
        if no_loss:
            labels[-no_loss:] = -100
        return MicroBatch(ids, (segments > 0).long(), labels, position_ids=positions,
                          segments=segments, real_tokens=real)


def pack(examples: Encoded) -> Packed:
    """``examples`` packed into rows of ``seq_len``: best fit, longest first (see above)."""
    lengths = examples.lengths.tolist()
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    holding: dict[int, list[int]] = {}  # free room -> the rows with exactly that much
    rooms: list[int] = []  # the free rooms some row has, in order
    for i in order:
        length = lengths[i]
        k = bisect.bisect_left(rooms, length)
        if k == len(rooms):  # no row has room: a new one
            r, room = len(rows), examples.seq_len
            rows.append([])
        else:
            room = rooms[k]
            r = holding[room].pop()
            if not holding[room]:
                del holding[room], rooms[k]
        rows[r].append(i)
        room -= length
        if room > 0:
            if room not in holding:
                holding[room] = []
                bisect.insort(rooms, room)
            holding[room].append(r)
    members = torch.tensor([i for row in rows for i in row], dtype=torch.long)
    bounds = torch.tensor([0] + [len(row) for row in rows], dtype=torch.long).cumsum(0)
    return Packed(examples, members, bounds)


def attention_masks(mb: MicroBatch, config, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The masks of a packed micro-batch by layer type (``full_attention``, and
    ``sliding_attention`` where the model has sliding layers), as its attention takes them
    (eager: 0 where a position may attend, the dtype's minimum where not), on the host:
    causal, within the position's own example."""
    from transformers.masking_utils import (
        create_causal_mask,
        create_sliding_window_causal_mask,
    )

    segments = mb.segments

    def same_example(batch, head, q, kv):
        return segments[batch, q] == segments[batch, kv]

    # The mask functions read only the shape, dtype and device of the embeddings. No position
    # ids: transformers would look for packed rows in them itself.
    shape = torch.empty(*segments.shape, 1, dtype=dtype)
    kw = {"config": config, "inputs_embeds": shape, "attention_mask": None, "cache": None,
          "and_mask_function": same_example}
    masks = {"full_attention": create_causal_mask(**kw)}
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        masks["sliding_attention"] = create_sliding_window_causal_mask(**kw)
    return masks
