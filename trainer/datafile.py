"""A data file read as a stream, within bounds: its size, its lines' length, UTF-8.

The trainer reads ``--data`` and ``--eval-data`` files through ``lines`` (trainer/data/batches.py
parses each line); ``submit`` runs ``check`` over the same file (daemon/run/spec.py), so a
file the trainer would refuse is refused before it is queued, in the same words. ``named``
says what a ``--data`` spec names (a Parquet file or a datasets folder is a table:
trainer/datatable.py). A file is
read a line at a time, never whole, and a line past ``MAX_LINE_BYTES`` is refused rather
than handed to the tokenizer (a 2 GB line once made it abort at 8.4 GB of memory).
Torch-free (a shared module: the daemon imports it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from trainer.errors import UsageError
from trainer.ownership import NotOurs, open_regular

#: The largest data file read unless ``--max-data-bytes`` says otherwise: 256 MiB. The
#: fine-tuning sets this trainer is for are tens of MB (NSMC's training set 14.6 MB,
#: Alpaca 22 MB, Dolly 13 MB), and the trainer holds 7 to 9 bytes of memory per byte of
#: text while it reads, tokenizes and packs it (``bench/trainer_data_bounds.py data``), so
#: the default keeps a data set under about 2 GB of the host's memory.
MAX_DATA_BYTES = 256 << 20
#: The longest line (one example) a data file may have: 1 MiB, past the positions of any
#: model the trainer builds (llama-3.1-8b-mini's 131,072 at about 4 bytes a token is 512
#: KiB): a longer line is not one example but a file that lacks its newlines.
MAX_LINE_BYTES = 1 << 20


#: The kinds of data ``--data`` names beside ``synthetic``, each with a path.
KINDS = ("nsmc", "jsonl", "parquet", "datasets")
SPEC_FORMS = ("synthetic, nsmc:PATH, jsonl:PATH (or a .jsonl file), parquet:PATH (or a .parquet "
              "file), or datasets:DIR (or a folder datasets' save_to_disk wrote)")


def named(spec: str) -> tuple[str, Path | None]:
    """(kind, path) of what a ``--data`` spec names (``synthetic``: no path), read from the
    spec alone, save that a bare folder is a datasets folder. UsageError for anything else."""
    if spec == "synthetic":
        return "synthetic", None
    kind, sep, rest = spec.partition(":")
    if sep and kind in KINDS and rest:
        return kind, Path(rest).expanduser()
    path = Path(spec).expanduser()
    for suffix, kind in ((".jsonl", "jsonl"), (".parquet", "parquet")):
        if spec.endswith(suffix):
            return kind, path
    try:
        if spec and path.is_dir():
            return "datasets", path
    except OSError:
        pass
    raise UsageError(f"unknown data {spec!r}: give {SPEC_FORMS}")


def lines(path: Path, *, max_bytes: int = MAX_DATA_BYTES,
          option: str = "--data") -> Iterator[tuple[int, str]]:
    """Each line of ``path`` (numbered from 1) as text without its newline, read a line at a
    time. UsageError, one line naming the file, for a file that cannot be read, is not a
    regular file, is larger than ``max_bytes``, has a line past ``MAX_LINE_BYTES`` or is not
    UTF-8."""
    path = Path(path)
    _check_size(path, max_bytes, option)
    try:
        fd = open_regular(path, what="data file", follow=True)
    except NotOurs as exc:
        raise UsageError(f"{option} {exc}") from None
    with os.fdopen(fd, "rb") as f:
        read = 0
        n = 0
        while True:
            # One byte past the cap and the newline: a longer line is refused, not read on.
            raw = f.readline(MAX_LINE_BYTES + 2)
            if not raw:
                return
            n += 1
            read += len(raw)
            if read > max_bytes:
                raise UsageError(f"{option} {path}: grew past --max-data-bytes {max_bytes:,} "
                                 "while it was read")
            body = raw[:-1] if raw.endswith(b"\n") else raw
            if len(body) > MAX_LINE_BYTES:
                raise UsageError(f"{path}:{n}: a line longer than {MAX_LINE_BYTES:,} bytes, "
                                 "past any model's positions: one example a line")
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UsageError(f"{path}:{n}: not UTF-8 text (byte 0x{body[exc.start]:02x} at "
                                 f"byte {exc.start + 1} of the line)") from None
            yield n, text


def check(path: Path, *, max_bytes: int = MAX_DATA_BYTES, option: str = "--data") -> None:
    """Read ``path`` through as the trainer will, keeping nothing: UsageError as ``lines``."""
    for _ in lines(path, max_bytes=max_bytes, option=option):
        pass


def _check_size(path: Path, max_bytes: int, option: str) -> None:
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror}") from None
    if size > max_bytes:
        raise UsageError(f"{option} {path}: {size:,} bytes, past --max-data-bytes "
                         f"{max_bytes:,} (give a larger --max-data-bytes to read it)")
