"""Data: NSMC TSV, JSONL, or synthetic sequences, as fixed-shape micro-batches.

Every micro-batch is ``[micro_batch, seq_len]`` (static shapes, so a compiled
device graph is reused): right-padded, with ``attention_mask`` and ``labels``
(-100 where no loss is taken: the prompt and the padding). Labels are not
shifted; the model's loss function shifts them.

- ``nsmc:PATH``: the NSMC TSV (``id<TAB>document<TAB>label``, header line).
  Each review becomes a Korean prompt and a one-word answer; the loss is on
  the answer (and the end token) only.
- ``jsonl:PATH`` or ``PATH.jsonl``: one object a line, with ``prompt`` and
  ``response`` (loss on the response) or ``text`` (loss on all of it).
- ``synthetic``: sequences from a fixed random Markov chain in which every
  token has four possible successors, so the loss falls from ln(vocab)
  towards ln(4) as the model learns the chain. No tokenizer needed.

The order of examples comes from ``--seed``: a fresh permutation each epoch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.errors import UsageError

SYNTHETIC_VOCAB = 128
SYNTHETIC_BRANCHING = 4
SYNTHETIC_POOL = 4096

NSMC_PROMPT = "다음 영화 리뷰의 감정은?\n리뷰: {review}\n감정:"
NSMC_ANSWERS = {0: " 부정", 1: " 긍정"}


@dataclass(frozen=True)
class Example:
    prompt: str  # no loss on these tokens ("" for plain text)
    answer: str  # loss on these tokens


@dataclass
class Source:
    """What ``--data`` names, read into memory."""

    kind: str  # "synthetic" | "nsmc" | "jsonl"
    path: Path | None
    examples: list[Example]

    def texts(self) -> list[str]:
        return [e.prompt + e.answer for e in self.examples]


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # [B, S] int64
    attention_mask: torch.Tensor  # [B, S] int64
    labels: torch.Tensor  # [B, S] int64, -100 = no loss

    @property
    def label_tokens(self) -> int:
        """How many positions carry loss once the labels are shifted by one."""
        return int((self.labels[:, 1:] != -100).sum())

    @property
    def tokens(self) -> int:
        return self.input_ids.numel()


def open_source(spec: str) -> Source:
    if spec == "synthetic":
        return Source("synthetic", None, [])
    if spec.startswith("nsmc:"):
        path = Path(spec[5:]).expanduser()
        return Source("nsmc", path, read_nsmc(path))
    if spec.startswith("jsonl:") or spec.endswith(".jsonl"):
        path = Path(spec.removeprefix("jsonl:")).expanduser()
        return Source("jsonl", path, read_jsonl(path))
    raise UsageError(f"unknown data {spec!r}: give synthetic, nsmc:PATH, jsonl:PATH or a .jsonl file")


def read_nsmc(path: Path) -> list[Example]:
    if not path.is_file():
        raise UsageError(f"NSMC file not found: {path}")
    with path.open(encoding="utf-8") as f:
        examples = read_nsmc_lines(f)
    if not examples:
        raise UsageError(f"no NSMC rows (id<TAB>document<TAB>label) in {path}")
    return examples


def read_nsmc_lines(lines) -> list[Example]:
    examples = []
    for n, line in enumerate(lines):
        parts = line.rstrip("\r\n").split("\t")
        if n == 0 and parts[:3] == ["id", "document", "label"]:
            continue
        if len(parts) != 3 or parts[2] not in ("0", "1") or not parts[1].strip():
            continue  # the corpus has a few empty or broken rows
        examples.append(Example(NSMC_PROMPT.format(review=parts[1].strip()),
                                NSMC_ANSWERS[int(parts[2])]))
    return examples


def read_jsonl(path: Path) -> list[Example]:
    if not path.is_file():
        raise UsageError(f"JSONL file not found: {path}")
    examples = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise UsageError(f"{path}:{n}: not JSON") from None
            if isinstance(obj, dict) and isinstance(obj.get("prompt"), str) \
                    and isinstance(obj.get("response"), str):
                examples.append(Example(obj["prompt"], obj["response"]))
            elif isinstance(obj, dict) and isinstance(obj.get("text"), str):
                examples.append(Example("", obj["text"]))
            else:
                raise UsageError(f"{path}:{n}: needs \"prompt\" and \"response\", or \"text\"")
    if not examples:
        raise UsageError(f"no examples in {path}")
    return examples


# === Encoding ================================================================


def encode(examples: list[Example], tokenizer, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and labels, ``[N, seq_len]``, right-padded; the prompt is cut from the left."""
    bos, eos, pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    prompts = tokenizer([e.prompt for e in examples], add_special_tokens=False)["input_ids"]
    answers = tokenizer([e.answer for e in examples], add_special_tokens=False)["input_ids"]
    ids = torch.full((len(examples), seq_len), pad, dtype=torch.long)
    labels = torch.full((len(examples), seq_len), -100, dtype=torch.long)
    head = [bos] if bos is not None else []
    for i, (p, a) in enumerate(zip(prompts, answers)):
        a = (a + [eos])[: seq_len - len(head) - 1]
        p = p[max(0, len(p) - (seq_len - len(head) - len(a))):]
        row = head + p + a
        ids[i, : len(row)] = torch.tensor(row)
        labels[i, len(head) + len(p): len(row)] = torch.tensor(a)
    return ids, labels


def synthetic(seq_len: int, vocab: int, seed: int, count: int = SYNTHETIC_POOL,
              draw: int | None = None):
    """``count`` sequences of a random Markov chain with four successors per token.

    ``draw``: sequences drawn with a generator of their own from the same chain
    (held-out data for the seed's training pool); None: the training pool.
    """
    gen = torch.Generator().manual_seed(10_000 + seed)
    successors = torch.randint(0, vocab, (vocab, SYNTHETIC_BRANCHING), generator=gen)
    if draw is not None:
        gen = torch.Generator().manual_seed(20_000 + draw)
    ids = torch.empty((count, seq_len), dtype=torch.long)
    ids[:, 0] = torch.randint(0, vocab, (count,), generator=gen)
    for t in range(1, seq_len):
        pick = torch.randint(0, SYNTHETIC_BRANCHING, (count,), generator=gen)
        ids[:, t] = successors[ids[:, t - 1], pick]
    return ids, ids.clone()


class Batches:
    """An endless stream of micro-batches in a seeded order."""

    def __init__(self, ids: torch.Tensor, labels: torch.Tensor, pad_id: int,
                 micro_batch: int, seed: int):
        if ids.shape[0] < micro_batch:
            raise UsageError(f"only {ids.shape[0]} examples for micro-batches of {micro_batch}")
        self.ids, self.labels, self.pad_id = ids, labels, pad_id
        self.micro_batch, self.seed = micro_batch, seed

    def __iter__(self) -> Iterator[MicroBatch]:
        return self.stream()

    @property
    def per_epoch(self) -> int:
        """Micro-batches in one pass over the examples (a last partial one is dropped)."""
        return self.ids.shape[0] // self.micro_batch

    def stream(self, skip: int = 0) -> Iterator[MicroBatch]:
        """The stream from its ``skip``-th micro-batch on: where a resumed pass goes on."""
        epoch, first = divmod(skip, self.per_epoch)
        while True:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            order = torch.randperm(self.ids.shape[0], generator=gen)
            for start in range(first * self.micro_batch, len(order) - self.micro_batch + 1,
                               self.micro_batch):
                yield _micro_batch(self.ids, self.labels, self.pad_id,
                                   order[start: start + self.micro_batch])
            epoch, first = epoch + 1, 0


def _micro_batch(all_ids: torch.Tensor, all_labels: torch.Tensor, pad_id: int,
                 rows: torch.Tensor) -> MicroBatch:
    ids, labels = all_ids[rows], all_labels[rows]
    # Attend to everything up to the last real token of each row.
    real = (labels != -100) | (ids != pad_id)
    last = torch.where(real, torch.arange(ids.shape[1]), -1).max(dim=1).values
    mask = (torch.arange(ids.shape[1])[None, :] <= last[:, None]).long()
    return MicroBatch(ids, mask, labels)


def make_batches(source: Source, tokenizer, seq_len: int, micro_batch: int, seed: int,
                 vocab: int) -> Batches:
    ids, labels, pad_id = encoded(source, tokenizer, seq_len, seed, vocab)
    return Batches(ids, labels, pad_id, micro_batch, seed)


def encoded(source: Source, tokenizer, seq_len: int, seed: int, vocab: int,
            draw: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(token ids, labels, pad id) of every example, one row each (``draw``: see synthetic)."""
    if source.kind == "synthetic":
        ids, labels = synthetic(seq_len, vocab, seed, count=SYNTHETIC_EVAL if draw is not None
                                else SYNTHETIC_POOL, draw=draw)
        return ids, labels, -1
    ids, labels = encode(source.examples, tokenizer, seq_len)
    return ids, labels, tokenizer.pad_token_id


# === Held-out data ===========================================================

#: Sequences of ``--eval-data synthetic``: new draws from the training pool's chain.
SYNTHETIC_EVAL = 256


def hold_out(ids: torch.Tensor, labels: torch.Tensor, fraction: float, seed: int,
             micro_batch: int) -> tuple[tuple[torch.Tensor, torch.Tensor],
                                        tuple[torch.Tensor, torch.Tensor]]:
    """((train ids, labels), (held-out ids, labels)): a seeded ``fraction`` of the examples
    held out, disjoint by example (a row is one example)."""
    n = ids.shape[0]
    held = max(1, round(n * fraction))
    if n - held < micro_batch:
        raise UsageError(f"--eval-split {fraction} of {n} examples leaves {n - held} to train "
                         f"on, fewer than a micro-batch of {micro_batch}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 - 1))
    test, train = order[:held].sort().values, order[held:].sort().values
    return (ids[train], labels[train]), (ids[test], labels[test])


def eval_batches(ids: torch.Tensor, labels: torch.Tensor, pad_id: int,
                 micro_batch: int) -> list[MicroBatch]:
    """Every held-out example once, in order, in micro-batches of the training shape.

    The last one is filled up with rows that carry no loss (labels -100), so a
    card runs the graph it compiled for training, and the mean is unchanged.
    """
    n = ids.shape[0]
    rows = torch.arange(n)
    fill = (-n) % micro_batch
    if fill:
        ids = torch.cat([ids, ids[:1].expand(fill, -1)])
        labels = torch.cat([labels, torch.full((fill, labels.shape[1]), -100,
                                               dtype=labels.dtype)])
        rows = torch.arange(n + fill)
    return [_micro_batch(ids, labels, pad_id, rows[i: i + micro_batch])
            for i in range(0, len(rows), micro_batch)]


def tokenizer_vocab(texts: list[str]) -> int:
    """A BPE vocabulary size that suits the amount of text: 512 to 4096."""
    chars = sum(len(t) for t in texts)
    return int(min(4096, max(512, 2 ** round(math.log2(max(chars, 1) / 100)))))
