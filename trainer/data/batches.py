"""Data: NSMC TSV, JSONL, tables, or synthetic sequences, as fixed-shape micro-batches.

Every micro-batch is ``[micro_batch, seq_len]`` (static shapes, so a compiled
device graph is reused): right-padded, with ``attention_mask`` and ``labels``
(-100 where no loss is taken: the prompt and the padding). Labels are not
shifted; the model's loss function shifts them. With ``--pack`` a row holds several
examples (trainer/data/packing.py) and the micro-batch says where each begins.

- ``nsmc:PATH``: the NSMC TSV (``id<TAB>document<TAB>label``, header line).
  Each review becomes a Korean prompt and a one-word answer; the loss is on
  the answer (and the end token) only.
- ``jsonl:PATH`` or ``PATH.jsonl``: one object a line; ``parquet:PATH`` or ``PATH.parquet``,
  ``datasets:DIR`` or a folder (trainer/datatable.py): one a row. Each is a chat
  (``messages``, ShareGPT, Alpaca: rendered with the model's chat template, the loss on the
  assistant's turns, trainer/data/chat.py), ``prompt`` and ``response`` (loss on the
  response) or ``text`` (loss on all of it): trainer/data/formats.py.
- ``synthetic``: sequences from a fixed random Markov chain in which every
  token has four possible successors, so the loss falls from ln(vocab)
  towards ln(4) as the model learns the chain. No tokenizer needed.

**Too long for ``--seq-len``** (each counted, ``Fitted``): a prompt and response keeps its
answer and end token (cut at its end only if they alone do not fit) and loses the prompt's
beginning; a chat follows trainer/data/chat.py's rule (earlier turns dropped, then the last
answer cut at its end, else the example left out).

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

from trainer import datafile, datatable
from trainer.data.formats import Conversation, Example, example_of
from trainer.datafile import MAX_DATA_BYTES
from trainer.errors import UsageError
from trainer.modelconfig import MAX_TRAINED_VOCAB

SYNTHETIC_VOCAB = 128
SYNTHETIC_BRANCHING = 4
SYNTHETIC_POOL = 4096

NSMC_PROMPT = "다음 영화 리뷰의 감정은?\n리뷰: {review}\n감정:"
NSMC_ANSWERS = {0: " 부정", 1: " 긍정"}


__all__ = ["Conversation", "Example"]  # formats' classes, read here by the data's users


@dataclass
class Source:
    """What ``--data`` names, read into memory."""

    kind: str  # "synthetic" | "nsmc" | "jsonl" | "parquet" | "datasets"
    path: Path | None
    examples: list[Example] | list[Conversation]

    @property
    def chats(self) -> bool:
        """Its examples are chats (one form a source: ``read_records``)."""
        return bool(self.examples) and isinstance(self.examples[0], Conversation)

    def texts(self) -> list[str]:
        return [e.text() if isinstance(e, Conversation) else e.prompt + e.answer
                for e in self.examples]

    def sample(self, rows: torch.Tensor) -> Source:
        """The same source with only these examples, in this order."""
        return Source(self.kind, self.path, [self.examples[i] for i in rows.tolist()])


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # [B, S] int64
    attention_mask: torch.Tensor  # [B, S] int64
    labels: torch.Tensor  # [B, S] int64, -100 = no loss
    #: Packed rows (``--pack``): each position's place in its own example, from 0 at each
    #: example's start (the rotary positions), and which example of the row it holds (1, 2,
    #: ...; 0 the padding after the last), so attention stays within it. None: one example
    #: a row, at positions 0..S-1.
    position_ids: torch.Tensor | None = None  # [B, S] int64
    segments: torch.Tensor | None = None  # [B, S] int64
    #: Positions that hold an example's token (not padding); None: every position.
    real_tokens: int | None = None

    @property
    def label_tokens(self) -> int:
        """How many positions carry loss once the labels are shifted by one."""
        return int((self.labels[:, 1:] != -100).sum())

    @property
    def tokens(self) -> int:
        """The real (non-padding) tokens: what tok/s counts."""
        return self.input_ids.numel() if self.real_tokens is None else self.real_tokens

    @property
    def positions(self) -> int:
        """Every position, padding included: what the device computes."""
        return self.input_ids.numel()


def open_source(spec: str, max_bytes: int = MAX_DATA_BYTES, option: str = "--data") -> Source:
    """What ``spec`` names, read within ``max_bytes`` (UsageError, one line, otherwise)."""
    kind, path = datafile.named(spec)
    if kind == "synthetic":
        return Source("synthetic", None, [])
    if kind == "nsmc":
        return Source("nsmc", path, read_nsmc(path, max_bytes, option))
    if kind == "jsonl":
        return Source("jsonl", path, read_jsonl(path, max_bytes, option))
    rows = datatable.rows(path, max_bytes=max_bytes, option=option, kind=kind)
    return Source(kind, path, read_records(rows, path))


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
               ) -> list[Example] | list[Conversation]:
    return read_records(_json_lines(path, max_bytes, option), path)


def _json_lines(path: Path, max_bytes: int, option: str):
    for n, line in datafile.lines(path, max_bytes=max_bytes, option=option):
        if not line.strip():
            continue
        try:
            yield f"{path}:{n}", json.loads(line)
        except (ValueError, RecursionError):
            raise UsageError(f"{path}:{n}: not JSON") from None


def read_records(records, path: Path) -> list[Example] | list[Conversation]:
    """The example each (where, object) of ``records`` holds (formats.py), all of one kind:
    chats, or prompts and texts (UsageError naming the first that differs)."""
    examples = []
    for where, obj in records:
        example = example_of(obj, where)
        if examples and isinstance(example, Conversation) != isinstance(examples[0],
                                                                        Conversation):
            raise UsageError(f"{where}: a {_form(example)} after {_form(examples[0])}s: "
                             "one form a data set (chats, or prompts and texts)")
        examples.append(example)
    if not examples:
        raise UsageError(f"no examples in {path}")
    return examples


def _form(example) -> str:
    return "chat" if isinstance(example, Conversation) else "prompt or text"


# === Encoding ================================================================

#: Examples tokenized in one call: the tokenizer's batch output (an object per example with
#: its tokens, offsets and masks) costs hundreds of bytes a token, so it is never made for
#: the whole set at once.
ENCODE_CHUNK = 1024


@dataclass
class Fitted:
    """How many examples longer than ``--seq-len`` were made to fit, and how (the start
    record's ``data``): never one left out or cut without being counted here."""

    prompt_cut: int = 0  # a prompt and response: the prompt's beginning cut
    turns_dropped: int = 0  # a chat: its earliest turns dropped, the system prompt kept
    answer_cut: int = 0  # the (last) answer cut at its end: its end token lost
    skipped: int = 0  # not one answer token fits: left out

    @property
    def total(self) -> int:
        return self.prompt_cut + self.turns_dropped + self.answer_cut + self.skipped


@dataclass(frozen=True)
class Encoded:
    """Examples as rows of tokens, packed end to end in one buffer.

    Row ``i`` is ``tokens[starts[i]:starts[i + 1]]`` (at most ``seq_len`` tokens) and its
    loss is on the tokens ``trained`` marks. ``micro_batch`` pads the rows it is asked for
    to ``[B, seq_len]`` when they are used, so the set costs its tokens' 5 bytes each, not
    16 bytes for every position of every padded row.
    """

    tokens: torch.Tensor  # [T] int32
    starts: torch.Tensor  # [N + 1] int64
    trained: torch.Tensor  # [T] bool: the loss is on this token
    seq_len: int
    pad_id: int

    def __len__(self) -> int:
        return self.starts.shape[0] - 1

    @classmethod
    def full_rows(cls, ids: torch.Tensor, pad_id: int) -> Encoded:
        """Rows of ``seq_len`` tokens each with the loss on all of them (synthetic data)."""
        n, seq_len = ids.shape
        return cls(ids.reshape(-1).to(torch.int32), torch.arange(n + 1) * seq_len,
                   torch.ones(n * seq_len, dtype=torch.bool), seq_len, pad_id)

    @property
    def lengths(self) -> torch.Tensor:
        return self.starts[1:] - self.starts[:-1]

    def __getitem__(self, rows: torch.Tensor) -> Encoded:
        """These rows (a 1-D index tensor), in this order, packed anew."""
        lengths = self.lengths[rows]
        starts = torch.zeros(len(rows) + 1, dtype=torch.long)
        starts[1:] = lengths.cumsum(0)
        offsets = torch.arange(int(starts[-1])) - starts[:-1].repeat_interleave(lengths)
        picked = self.starts[:-1][rows].repeat_interleave(lengths) + offsets
        return Encoded(self.tokens[picked], starts, self.trained[picked], self.seq_len,
                       self.pad_id)

    @property
    def label_tokens(self) -> int:
        """Positions that carry loss once the labels are shifted by one (``MicroBatch``'s):
        the trained tokens less each row's first (nothing before it predicts it)."""
        firsts = self.starts[:-1][self.lengths > 0]
        return int(self.trained.sum()) - int(self.trained[firsts].sum())

    @property
    def real_tokens(self) -> int:
        return int(self.starts[-1])

    def row(self, r: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row ``r``'s token ids (int64) and labels (-100 where no loss is taken)."""
        lo, hi = int(self.starts[r]), int(self.starts[r + 1])
        ids = self.tokens[lo:hi].long()
        return ids, torch.where(self.trained[lo:hi], ids, -100)

    def dense(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and labels of these rows, ``[len(rows), seq_len]``, right-padded."""
        ids = torch.full((len(rows), self.seq_len), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), self.seq_len), -100, dtype=torch.long)
        for i, r in enumerate(rows.tolist()):
            row, lab = self.row(r)
            ids[i, : len(row)] = row
            labels[i, : len(row)] = lab
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
        return MicroBatch(ids, mask, labels, real_tokens=int(self.lengths[rows].sum()))


def encode_examples(examples: list[Example], tokenizer, seq_len: int,
                    fitted: Fitted | None = None) -> Encoded:
    """Every example as one row: ``[bos] prompt answer eos``, the loss on the answer and the
    end token; too long, the prompt is cut from the left (the answer cut at its end only when
    it alone does not fit), counted in ``fitted``. Tokenized a chunk at a time."""
    bos, eos, pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    head = [bos] if bos is not None else []
    fitted = fitted if fitted is not None else Fitted()
    tokens, starts, trained = array("i"), array("q", [0]), array("b")
    for lo in range(0, len(examples), ENCODE_CHUNK):
        chunk = examples[lo: lo + ENCODE_CHUNK]
        prompts = tokenizer([e.prompt for e in chunk], add_special_tokens=False)["input_ids"]
        answers = tokenizer([e.answer for e in chunk], add_special_tokens=False)["input_ids"]
        for p, a in zip(prompts, answers):
            whole = a + [eos]
            a = whole[: seq_len - len(head) - 1]
            kept = p[max(0, len(p) - (seq_len - len(head) - len(a))):]
            if len(a) < len(whole):
                fitted.answer_cut += 1
            elif len(kept) < len(p):
                fitted.prompt_cut += 1
            tokens.extend(head + kept + a)
            trained.extend([0] * (len(head) + len(kept)) + [1] * len(a))
            starts.append(len(tokens))
    return Encoded(_tensor(tokens, torch.int32), _tensor(starts, torch.long),
                   _tensor(trained, torch.int8).bool(), seq_len, pad)


def _tensor(values: array, dtype: torch.dtype) -> torch.Tensor:
    return torch.frombuffer(values, dtype=dtype).clone() if len(values) else \
        torch.empty(0, dtype=dtype)


def encode(examples: list[Example], tokenizer, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and labels, ``[N, seq_len]``, right-padded; the prompt is cut from the left."""
    rows = encode_examples(examples, tokenizer, seq_len)
    return rows.dense(torch.arange(len(rows)))


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
            raise UsageError(f"only {len(encoded)} rows (examples, or packed rows with --pack) "
                             f"for micro-batches of {micro_batch}")
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
            draw: int | None = None, fitted: Fitted | None = None) -> Encoded:
    """Every example of ``source`` (synthetic, or prompts and texts: chats are
    trainer/data/chat.py's), one row each (``draw``: see synthetic); how the long ones were
    made to fit is counted in ``fitted``."""
    if source.kind == "synthetic":
        ids, _ = synthetic(seq_len, vocab, seed, count=SYNTHETIC_EVAL if draw is not None
                           else SYNTHETIC_POOL, draw=draw)
        return Encoded.full_rows(ids, pad_id=-1)
    return encode_examples(source.examples, tokenizer, seq_len, fitted)


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
