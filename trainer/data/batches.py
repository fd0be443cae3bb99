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

Files are read a line at a time within ``--max-data-bytes`` (trainer/datafile.py), and
tokenized a chunk of examples at a time into one packed buffer of token rows
(``Encoded``): memory grows with the data's tokens, not with examples x ``--seq-len``,
and each padded micro-batch is made when it is used.
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer import datafile
from trainer.datafile import MAX_DATA_BYTES
from trainer.errors import UsageError
from trainer.modelconfig import MAX_TRAINED_VOCAB

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

    def sample(self, rows: torch.Tensor) -> Source:
        """The same source with only these examples, in this order."""
        return Source(self.kind, self.path, [self.examples[i] for i in rows.tolist()])


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


def open_source(spec: str, max_bytes: int = MAX_DATA_BYTES, option: str = "--data") -> Source:
    """What ``spec`` names, read within ``max_bytes`` (UsageError, one line, otherwise)."""
    if spec == "synthetic":
        return Source("synthetic", None, [])
    if spec.startswith("nsmc:"):
        path = Path(spec[5:]).expanduser()
        return Source("nsmc", path, read_nsmc(path, max_bytes, option))
    if spec.startswith("jsonl:") or spec.endswith(".jsonl"):
        path = Path(spec.removeprefix("jsonl:")).expanduser()
        return Source("jsonl", path, read_jsonl(path, max_bytes, option))
    raise UsageError(f"unknown data {spec!r}: give synthetic, nsmc:PATH, jsonl:PATH or a .jsonl file")


def open_eval_source(spec: str | None, max_bytes: int, training: Source) -> Source | None:
    """What ``--eval-data`` names (None: nothing), of the training data's kind."""
    if spec is None:
        return None
    source = open_source(spec, max_bytes, "--eval-data")
    if (source.kind == "synthetic") != (training.kind == "synthetic"):
        raise UsageError(f"--eval-data {spec}: synthetic held-out data goes with synthetic "
                         f"training data only, text with text")
    return source


def read_nsmc(path: Path, max_bytes: int = MAX_DATA_BYTES, option: str = "--data"
              ) -> list[Example]:
    rows = (text for _, text in datafile.lines(path, max_bytes=max_bytes, option=option))
    examples = read_nsmc_lines(rows)
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


def read_jsonl(path: Path, max_bytes: int = MAX_DATA_BYTES, option: str = "--data"
               ) -> list[Example]:
    examples = []
    for n, line in datafile.lines(path, max_bytes=max_bytes, option=option):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
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

#: Examples tokenized in one call: the tokenizer's batch output (an object per example with
#: its tokens, offsets and masks) costs hundreds of bytes a token, so it is never made for
#: the whole set at once.
ENCODE_CHUNK = 1024


@dataclass(frozen=True)
class Encoded:
    """Examples as rows of tokens, packed end to end in one buffer.

    Row ``i`` is ``tokens[starts[i]:starts[i + 1]]`` (at most ``seq_len`` tokens) and its
    loss is on its tokens from ``label_from[i]`` on. ``micro_batch`` pads the rows it is
    asked for to ``[B, seq_len]`` when they are used, so the set costs its tokens' 4 bytes
    each, not 16 bytes for every position of every padded row.
    """

    tokens: torch.Tensor  # [T] int32
    starts: torch.Tensor  # [N + 1] int64
    label_from: torch.Tensor  # [N] int64
    seq_len: int
    pad_id: int

    def __len__(self) -> int:
        return self.label_from.shape[0]

    @classmethod
    def full_rows(cls, ids: torch.Tensor, pad_id: int) -> Encoded:
        """Rows of ``seq_len`` tokens each with the loss on all of them (synthetic data)."""
        n, seq_len = ids.shape
        return cls(ids.reshape(-1).to(torch.int32), torch.arange(n + 1) * seq_len,
                   torch.zeros(n, dtype=torch.long), seq_len, pad_id)

    def __getitem__(self, rows: torch.Tensor) -> Encoded:
        """These rows (a 1-D index tensor), in this order, packed anew."""
        lengths = (self.starts[1:] - self.starts[:-1])[rows]
        starts = torch.zeros(len(rows) + 1, dtype=torch.long)
        starts[1:] = lengths.cumsum(0)
        offsets = torch.arange(int(starts[-1])) - starts[:-1].repeat_interleave(lengths)
        picked = self.starts[:-1][rows].repeat_interleave(lengths) + offsets
        return Encoded(self.tokens[picked], starts, self.label_from[rows], self.seq_len,
                       self.pad_id)

    @property
    def label_tokens(self) -> int:
        """Positions that carry loss once the labels are shifted by one (``MicroBatch``'s)."""
        lengths = self.starts[1:] - self.starts[:-1]
        return int((lengths - self.label_from.clamp(min=1)).clamp(min=0).sum())

    def dense(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and labels of these rows, ``[len(rows), seq_len]``, right-padded."""
        ids = torch.full((len(rows), self.seq_len), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), self.seq_len), -100, dtype=torch.long)
        for i, r in enumerate(rows.tolist()):
            row = self.tokens[self.starts[r]: self.starts[r + 1]].long()
            first = int(self.label_from[r])
            ids[i, : len(row)] = row
            labels[i, first: len(row)] = row[first:]
        return ids, labels

    def micro_batch(self, rows: torch.Tensor, no_loss: int = 0) -> MicroBatch:
        """These rows as a micro-batch; its last ``no_loss`` rows carry no loss (a fill)."""
        ids, labels = self.dense(rows)
        if no_loss:
            labels[-no_loss:] = -100
        # Attend to everything up to the last real token of each row.
        real = (labels != -100) | (ids != self.pad_id)
        last = torch.where(real, torch.arange(ids.shape[1]), -1).max(dim=1).values
        mask = (torch.arange(ids.shape[1])[None, :] <= last[:, None]).long()
        return MicroBatch(ids, mask, labels)


def pack(examples: list[Example], tokenizer, seq_len: int) -> Encoded:
    """Every example as one row: ``[bos] prompt answer eos``, the prompt cut from the left
    to fit ``seq_len``, the loss on the answer and the end token; tokenized a chunk at a time."""
    bos, eos, pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    head = [bos] if bos is not None else []
    tokens, starts, label_from = array("i"), array("q", [0]), array("q")
    for lo in range(0, len(examples), ENCODE_CHUNK):
        chunk = examples[lo: lo + ENCODE_CHUNK]
        prompts = tokenizer([e.prompt for e in chunk], add_special_tokens=False)["input_ids"]
        answers = tokenizer([e.answer for e in chunk], add_special_tokens=False)["input_ids"]
        for p, a in zip(prompts, answers):
            a = (a + [eos])[: seq_len - len(head) - 1]
            p = p[max(0, len(p) - (seq_len - len(head) - len(a))):]
            label_from.append(len(head) + len(p))
            tokens.extend(head + p + a)
            starts.append(len(tokens))
    return Encoded(_tensor(tokens, torch.int32), _tensor(starts, torch.long),
                   _tensor(label_from, torch.long), seq_len, pad)


def _tensor(values: array, dtype: torch.dtype) -> torch.Tensor:
    return torch.frombuffer(values, dtype=dtype).clone() if len(values) else \
        torch.empty(0, dtype=dtype)


def encode(examples: list[Example], tokenizer, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and labels, ``[N, seq_len]``, right-padded; the prompt is cut from the left."""
    packed = pack(examples, tokenizer, seq_len)
    return packed.dense(torch.arange(len(packed)))


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

    def __init__(self, encoded: Encoded, micro_batch: int, seed: int):
        if len(encoded) < micro_batch:
            raise UsageError(f"only {len(encoded)} examples for micro-batches of {micro_batch}")
        self.encoded = encoded
        self.micro_batch, self.seed = micro_batch, seed

    def __iter__(self) -> Iterator[MicroBatch]:
        return self.stream()

    @property
    def per_epoch(self) -> int:
        """Micro-batches in one pass over the examples (a last partial one is dropped)."""
        return len(self.encoded) // self.micro_batch

    def stream(self, skip: int = 0) -> Iterator[MicroBatch]:
        """The stream from its ``skip``-th micro-batch on: where a resumed pass goes on."""
        epoch, first = divmod(skip, self.per_epoch)
        while True:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            order = torch.randperm(len(self.encoded), generator=gen)
            for start in range(first * self.micro_batch, len(order) - self.micro_batch + 1,
                               self.micro_batch):
                yield self.encoded.micro_batch(order[start: start + self.micro_batch])
            epoch, first = epoch + 1, 0


def make_batches(source: Source, tokenizer, seq_len: int, micro_batch: int, seed: int,
                 vocab: int) -> Batches:
    return Batches(encoded(source, tokenizer, seq_len, seed, vocab), micro_batch, seed)


def encoded(source: Source, tokenizer, seq_len: int, seed: int, vocab: int,
            draw: int | None = None) -> Encoded:
    """Every example of ``source``, one row each (``draw``: see synthetic)."""
    if source.kind == "synthetic":
        ids, _ = synthetic(seq_len, vocab, seed, count=SYNTHETIC_EVAL if draw is not None
                           else SYNTHETIC_POOL, draw=draw)
        return Encoded.full_rows(ids, pad_id=-1)
    return pack(source.examples, tokenizer, seq_len)


# === Held-out data ===========================================================

#: Sequences of ``--eval-data synthetic``: new draws from the training pool's chain.
SYNTHETIC_EVAL = 256


def hold_out(encoded: Encoded, fraction: float, seed: int, micro_batch: int
             ) -> tuple[Encoded, Encoded]:
    """(training rows, held-out rows): a seeded ``fraction`` of the examples held out,
    disjoint by example (a row is one example)."""
    n = len(encoded)
    held = max(1, round(n * fraction))
    if n - held < micro_batch:
        raise UsageError(f"--eval-split {fraction} of {n} examples leaves {n - held} to train "
                         f"on, fewer than a micro-batch of {micro_batch}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 - 1))
    test, train = order[:held].sort().values, order[held:].sort().values
    return encoded[train], encoded[test]


def eval_rows(n: int, most: int, seed: int) -> torch.Tensor:
    """Which of ``n`` held-out examples are evaluated, in order: all of them, or a seeded
    draw of ``most`` (the same draw at every evaluation of the run)."""
    if n <= most:
        return torch.arange(n)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 - 2))
    return order[:most].sort().values


class EvalSet:
    """Every held-out example once, in order, in micro-batches of the training shape, each
    made as it is used.

    The last one is filled up with rows that carry no loss (labels -100), so a
    card runs the graph it compiled for training, and the mean is unchanged.
    """

    def __init__(self, encoded: Encoded, micro_batch: int):
        self.encoded, self.micro_batch = encoded, micro_batch

    @property
    def examples(self) -> int:
        return len(self.encoded)

    @property
    def label_tokens(self) -> int:
        return self.encoded.label_tokens

    def __len__(self) -> int:
        """Micro-batches in one evaluation."""
        return math.ceil(len(self.encoded) / self.micro_batch)

    def __iter__(self) -> Iterator[MicroBatch]:
        n, size = len(self.encoded), self.micro_batch
        for start in range(0, n, size):
            rows = torch.arange(start, min(start + size, n))
            fill = size - len(rows)
            if fill:  # the first row again, without loss
                rows = torch.cat([rows, torch.zeros(fill, dtype=torch.long)])
            yield self.encoded.micro_batch(rows, no_loss=fill)


def tokenizer_vocab(texts: list[str]) -> int:
    """A BPE vocabulary size that suits the amount of text: 512 to MAX_TRAINED_VOCAB."""
    chars = sum(len(t) for t in texts)
    return int(min(MAX_TRAINED_VOCAB, max(512, 2 ** round(math.log2(max(chars, 1) / 100)))))
