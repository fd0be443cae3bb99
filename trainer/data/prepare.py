"""The run's data made ready to train on: read, tokenized (or read back from the cache),
held out, packed. ``Recipe.setup`` calls ``prepare``; the start records carry its
``stats`` (trainer/records.py ``DATA_KEYS``).

The order: the data's bytes are hashed (``cache.digest``) and the cache looked up first, so a
second run or a resume reads the rows back without parsing the data, training a tokenizer,
rendering a chat or tokenizing (trainer/data/cache.py). Otherwise the data is read
(batches.py, formats.py, trainer/datatable.py), the tokenizer made (the model folder's, or
one trained on the data for a named config), each example encoded (chats by chat.py) and
the rows stored. Then ``--eval-split`` holds out whole examples, and ``--pack`` fills rows
with several (packing.py). The tokenizer itself is loaded only when a caller asks for it
(the saved model's folder gets its files).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainer import datafile
from trainer.data import batches, cache, chat, packing, tokenizer
from trainer.data.batches import Encoded, Fitted
from trainer.errors import UsageError
from trainer.output.console import log
from trainer.records import describe_data


@dataclass
class Prepared:
    """The training stream, the held-out set, the vocabulary and what the start record says
    of the data; the tokenizer on demand."""

    batches: batches.Batches
    eval_set: batches.EvalSet | None
    eval_examples: int
    vocab: int
    stats: dict
    load_tokenizer: Callable[[], object] = field(repr=False, default=lambda: None)
    _tokenizer: object = field(default=None, repr=False)

    @property
    def tokenizer(self):
        """The tokenizer the text was encoded with (None for synthetic data), loaded once."""
        if self._tokenizer is None:
            self._tokenizer = self.load_tokenizer()
        return self._tokenizer


def prepare(cfg, spec) -> Prepared:
    """``cfg``'s data (a TrainConfig) for the model ``spec`` (trainer.models.ModelSpec)."""
    kind, path = datafile.named(cfg.data)
    held_kind, held_path = datafile.named(cfg.eval_data) if cfg.eval_data else (None, None)
    if held_kind is not None and (held_kind == "synthetic") != (kind == "synthetic"):
        raise UsageError(f"--eval-data {cfg.eval_data}: synthetic held-out data goes with "
                         f"synthetic training data only, text with text")
    if kind == "synthetic":
        text = None
        vocab = spec.architecture.vocab if spec.folder is not None else batches.SYNTHETIC_VOCAB
        source = batches.Source("synthetic", None, [])
        rows = batches.encoded(source, None, cfg.seq_len, cfg.seed, min(vocab,
                                                                        batches.SYNTHETIC_VOCAB))
        fitted, form, state = Fitted(), "synthetic", None
    else:
        text = _Text(cfg, spec, kind, path, held_kind, held_path)
        rows, fitted, form, state = text.rows()
        vocab = text.vocab
    held = None
    if cfg.eval_split is not None:
        rows, held = batches.hold_out(rows, cfg.eval_split, cfg.seed, cfg.micro_batch)
        held = held[evaluated(len(held), cfg)]
    elif text is not None and cfg.eval_data is not None:
        held = text.eval_rows()
    elif cfg.eval_data is not None:  # new draws from the training pool's chain
        source = batches.Source("synthetic", None, [])
        held = batches.encoded(source, None, cfg.seq_len, cfg.seed,
                               min(vocab, batches.SYNTHETIC_VOCAB), draw=cfg.seed)
    examples = len(rows)
    train = packing.pack(rows) if cfg.pack else rows
    if held is not None:
        eval_examples = len(held)
        eval_set = batches.EvalSet(packing.pack(held) if cfg.pack else held, cfg.micro_batch)
    else:
        eval_examples, eval_set = 0, None
    stats = _stats(kind, form, examples, train, cfg, fitted, state)
    if kind != "synthetic":
        log(describe_data(stats))
    return Prepared(batches.Batches(train, cfg.micro_batch, cfg.seed), eval_set, eval_examples,
                    vocab, stats, load_tokenizer=text.tokenizer if text else lambda: None)


def evaluated(examples: int, cfg):
    """Which held-out examples are evaluated: all, or a seeded draw (said in a line)."""
    most = cfg.eval_max_examples
    if examples > most:
        log(f"held-out loss over {most:,} of {examples:,} held-out examples (a seeded "
            f"draw; --eval-max-examples)")
    return batches.eval_rows(examples, most, cfg.seed)


def _stats(kind: str, form: str, examples: int, train, cfg, fitted: Fitted,
           state: str | None) -> dict:
    positions = len(train) * cfg.seq_len
    real = train.real_tokens
    return {"source": kind, "form": form, "examples": examples, "rows": len(train),
            "seq_len": cfg.seq_len, "packed": bool(cfg.pack), "real_tokens": real,
            "padding_share": round(1 - real / positions, 4) if positions else 0.0,
            "fitted": asdict(fitted), "cache": state}


class _Text:
    """Text data and its tokenizer, read through the cache."""

    def __init__(self, cfg, spec, kind: str, path: Path, held_kind: str | None = None,
                 held_path: Path | None = None):
        self.cfg, self.spec, self.kind, self.path = cfg, spec, kind, path
        self.held_kind, self.held_path = held_kind, held_path
        self.cache_dir = Path(cfg.cache_dir) if cfg.cache_dir else tokenizer.default_cache_dir()
        self.source = None  # the training data, once parsed
        self._tokenizer = None
        self._trained_name = None  # a named config's trained tokenizer, in the cache
        self.vocab = spec.architecture.vocab if spec.folder is not None else None
        if spec.folder is not None:
            if not spec.has_tokenizer:
                raise UsageError(f"{spec.folder} has no tokenizer for text data")
            made_by = {"files": tokenizer.files_digest(spec.folder)}
        else:
            made_by = {"trained": tokenizer.TRAINER_VERSION}
        self.data_digest = cache.digest(kind, path, max_bytes=cfg.max_data_bytes)
        # --eval-data is checked now too, before any time goes into the training data.
        self.held_digest = None if held_path is None else cache.digest(
            held_kind, held_path, max_bytes=cfg.max_data_bytes, option="--eval-data")
        # A named config's tokenizer is trained on the training data: named by its digest.
        self.made_by = {**made_by, "on": self.data_digest if spec.folder is None else None,
                        **cache.library_versions()}

    def rows(self) -> tuple[Encoded, Fitted, str, str]:
        """(every example of the training data, one row each; how the long ones were made to
        fit; the data's form; what the cache did)."""
        name = self._key(self.kind, self.data_digest, draw=None)
        found = cache.load(self.cache_dir, name, self.cfg.max_data_bytes)
        if found is not None and self._from_cache(found[2]):
            rows, fitted, meta = found
            log(f"data: {len(rows):,} encoded examples read from the cache ({name[:12]})")
            return rows, fitted, meta["form"], "read"
        t0 = time.perf_counter()
        self.source = batches.open_source(self.cfg.data, self.cfg.max_data_bytes)
        form = _form(self.source)
        rows, fitted = self._encode(self.source)
        stored = cache.store(self.cache_dir, name, rows, fitted, self._meta(form))
        log(f"data: {len(rows):,} examples encoded in {time.perf_counter() - t0:.2f} s"
            + ("" if stored else f" (not cached: {self.cache_dir} cannot take it)"))
        return rows, fitted, form, "written" if stored else "not written"

    def eval_rows(self) -> Encoded:
        """The held-out rows of ``--eval-data``: a seeded draw of at most
        --eval-max-examples, drawn before they are tokenized."""
        draw = {"most": self.cfg.eval_max_examples, "seed": self.cfg.seed}
        name = self._key(self.held_kind, self.held_digest, draw=draw)
        found = cache.load(self.cache_dir, name, self.cfg.max_data_bytes)
        if found is not None:
            return found[0]
        source = batches.open_source(self.cfg.eval_data, self.cfg.max_data_bytes, "--eval-data")
        source = source.sample(evaluated(len(source.examples), self.cfg))
        rows, fitted = self._encode(source)
        cache.store(self.cache_dir, name, rows, fitted, self._meta(_form(source)))
        return rows

    def _key(self, kind: str, digest: str, draw: dict | None) -> str:
        return cache.key({"data": digest, "kind": kind, "seq_len": self.cfg.seq_len,
                          "tokenizer": self.made_by, "draw": draw})

    def _meta(self, form: str) -> dict:
        return {"form": form, "vocab": self.vocab, "trained_tokenizer": self._trained_name}

    def _from_cache(self, meta: dict) -> bool:
        """Take a cache entry's word for the vocabulary (a named config's tokenizer size);
        False when its trained tokenizer is no longer cached (then the data is read again)."""
        if self.spec.folder is not None:
            return True
        name = meta.get("trained_tokenizer")
        if not isinstance(name, str) or not isinstance(meta.get("vocab"), int) \
                or not os.path.exists(self.cache_dir / "tokenizers" / name / "tokenizer.json"):
            return False
        self._trained_name, self.vocab = name, meta["vocab"]
        return True

    def _encode(self, source: batches.Source) -> tuple[Encoded, Fitted]:
        fitted = Fitted()
        if source.chats:
            chat.check_template(None if self.spec.folder is None else self.tokenizer(),
                                self.cfg.model)
            rows = chat.encode_conversations(source.examples, self.tokenizer(),
                                             self.cfg.seq_len, fitted)
        else:
            rows = batches.encode_examples(source.examples, self.tokenizer(),
                                           self.cfg.seq_len, fitted)
        if not len(rows):
            raise UsageError(f"{self.cfg.data}: no example fits --seq-len {self.cfg.seq_len} "
                             f"({fitted.skipped:,} left out: not one answer token fits)")
        return rows, fitted

    def tokenizer(self):
        """The tokenizer: the model folder's, or the one trained on the training data."""
        if self._tokenizer is not None:
            return self._tokenizer
        if self.spec.folder is not None:
            self._tokenizer = tokenizer.from_folder(self.spec.folder)
            return self._tokenizer
        if self._trained_name is not None:
            self._tokenizer = tokenizer.cached(self._trained_name, self.cache_dir)
        if self._tokenizer is None:
            if self.source is None:
                self.source = batches.open_source(self.cfg.data, self.cfg.max_data_bytes)
            texts = self.source.texts()
            vocab = batches.tokenizer_vocab(texts)
            t0 = time.perf_counter()
            self._tokenizer = tokenizer.trained(texts, vocab, self.cache_dir)
            self._trained_name = tokenizer.trained_name(texts, vocab)
            log(f"tokenizer: {len(self._tokenizer)} tokens ({time.perf_counter() - t0:.2f} s)")
        self.vocab = len(self._tokenizer)
        return self._tokenizer


def _form(source: batches.Source) -> str:
    return "chat" if source.chats else "prompt"
