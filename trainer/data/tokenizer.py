"""Tokenizers: the model folder's own, or a byte-level BPE trained offline on the data.

The small named configs have no tokenizer of their own. For them a byte-level
BPE is trained on the run's text (Korean included, well under a second for a
few thousand lines) and cached under the cache folder, keyed by a hash of the
text and the vocabulary size, so the same data gives the same tokenizer.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from trainer.errors import UsageError
from trainer.ownership import NotOurs

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
TRAINER_VERSION = 1  # bump when the training recipe below changes


def default_cache_dir() -> Path:
    env = os.environ.get("RNGDCTL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "rngdctl"


#: The files of a model folder that make its tokenizer (its chat template among them).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
                   "chat_template.json", "vocab.json", "merges.txt", "vocab.txt")


def files_digest(folder: Path) -> str:
    """A sha256 over the tokenizer files of a model folder (each named), for a cache key."""
    from trainer.output.weights import file_digest

    lines = []
    for name in TOKENIZER_FILES:
        if (folder / name).exists():
            try:
                lines.append(f"{name} {file_digest(folder / name, follow_symlinks=True)}\n")
            except NotOurs as exc:
                raise UsageError(f"--model {folder}: {exc}") from None
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def from_folder(folder: Path):
    """The model folder's own tokenizer; UsageError, one line, when it cannot be loaded."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(folder)
    except Exception as exc:  # noqa: BLE001 - whatever the files make the loader raise
        raise UsageError(f"--model {folder}: its tokenizer cannot be loaded "
                         f"({_first_line(exc)})") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def trained_name(texts: list[str], vocab_size: int) -> str:
    """The cache folder's name of the tokenizer ``trained`` makes of ``texts``."""
    digest = hashlib.sha256()
    digest.update(f"v{TRAINER_VERSION} vocab={vocab_size}\n".encode())
    for t in texts:
        digest.update(t.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def cached(name: str, cache_dir: Path):
    """The trained tokenizer cached as ``name`` (``trained_name``), or None."""
    from transformers import PreTrainedTokenizerFast

    folder = cache_dir / "tokenizers" / name
    try:
        if (folder / "tokenizer.json").exists():
            return PreTrainedTokenizerFast.from_pretrained(folder)
    except OSError as exc:
        raise UsageError(f"tokenizer cache {cache_dir}: {exc.strerror or _first_line(exc)} "
                         "(give --cache-dir a folder of your own)") from None
    return None


def trained(texts: list[str], vocab_size: int, cache_dir: Path):
    """A byte-level BPE over ``texts``, loaded from the cache when it was made before."""
    from transformers import PreTrainedTokenizerFast

    folder = cache_dir / "tokenizers" / trained_name(texts, vocab_size)
    found = cached(folder.name, cache_dir)
    if found is not None:
        return found

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, bos_token=BOS, eos_token=EOS
    )
    # Write to a temporary folder first so a half-written cache is never read.
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        tok.save_pretrained(tmp)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UsageError(f"tokenizer cache {cache_dir}: {exc.strerror or _first_line(exc)} "
                         "(give --cache-dir a folder you can write)") from None
    try:
        tmp.rename(folder)
    except OSError:  # another process made it first: theirs is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return tok


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
