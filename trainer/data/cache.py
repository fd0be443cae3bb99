"""The encoded data, kept under the cache folder: a second run, or a resume, reads it back
instead of parsing, rendering and tokenizing the data again.

An entry is one file, ``CACHE/encoded/<key>.bin``: a line of JSON (what it holds, its sizes
and the xxh3_64 of the rest), then the rows' token ids (int32), the loss mask (a byte a
token) and the rows' starts (int64). The key (``key``) is a hash of everything the rows
depend on: the data's bytes (``digest``), the tokenizer's files (its chat template with
them) or, for a named config, the data its tokenizer was trained on, ``--seq-len``, what
was drawn of it, the encoding's version and the tokenizer libraries' versions. So any
change to one of them is another entry; nothing is ever stale.

Written atomically (a temporary file in the folder, then renamed), 0600 in a 0700 folder.
Read only when it is a private regular file of this user (trainer/ownership.py
``read_regular``), within a size cap, and verified (sizes and checksum) before it is used;
an entry that fails is read as missing and written again.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

import torch

from trainer import datatable
from trainer.data.batches import Encoded, Fitted
from trainer.datafile import MAX_DATA_BYTES
from trainer.errors import UsageError
from trainer.ownership import NotOurs, check_private, read_regular

FORMAT = 1
#: Bump when the encoding of any form changes (trainer/data/chat.py, batches.py's
#: ``encode_examples``): every entry then has another key.
ENCODING_VERSION = 1
#: An entry holds 5 bytes a token and 8 a row; text is rarely under a byte a token and a
#: chat template adds a few tokens a turn: 64 bytes of entry per byte of data is far past
#: any real one and keeps a planted file from filling the memory.
ENTRY_BYTES_PER_DATA_BYTE = 64
MAX_HEADER_BYTES = 64 << 10


def key(parts: dict) -> str:
    """The entry's name for ``parts`` (JSON values): a hash of all of them."""
    text = json.dumps({"format": FORMAT, "encoding": ENCODING_VERSION, **parts},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def library_versions() -> dict:
    """The versions of what renders and tokenizes: another version may split text otherwise
    (read from their metadata: importing transformers costs a second)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("tokenizers", "transformers", "jinja2"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


_DIGESTS: dict[tuple, str] = {}


def digest(kind: str, path: Path, *, max_bytes: int = MAX_DATA_BYTES,
           option: str = "--data") -> str:
    """The sha256 of the data's bytes: of a file, or of a datasets folder's files (each named
    with its own sha256), computed once a process per file state. UsageError, one line, as
    the data's reading would say it (missing, unreadable, not a regular file, past
    ``max_bytes``), before any byte is hashed."""
    files = [path] if kind != datatable.DATASETS else datatable.files(path, kind, option)
    states = [_state(f, option) for f in files]
    if sum(st.st_size for st in states) > max_bytes:
        raise UsageError(f"{option} {path}: {sum(st.st_size for st in states):,} bytes, past "
                         f"--max-data-bytes {max_bytes:,} (give a larger --max-data-bytes to "
                         "read it)")
    sums = [_memo(f, st, option) for f, st in zip(files, states)]
    if kind != datatable.DATASETS:
        return sums[0]
    lines = "".join(f"{f.name} {s}\n" for f, s in zip(files, sums))
    return hashlib.sha256(lines.encode()).hexdigest()


def _state(path: Path, option: str) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror}") from None


def _memo(path: Path, st: os.stat_result, option: str) -> str:
    from trainer.output.weights import file_digest

    name = (os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino)
    if name not in _DIGESTS:
        try:
            _DIGESTS[name] = file_digest(path, follow_symlinks=True)
        except NotOurs as exc:  # a FIFO, a device: never opened for reading
            raise UsageError(f"{option} {exc}") from None
        except OSError as exc:
            raise UsageError(f"{option} {path}: {exc.strerror}") from None
    return _DIGESTS[name]


def folder(cache_dir: Path) -> Path:
    return Path(cache_dir) / "encoded"


def load(cache_dir: Path, name: str, max_data_bytes: int = MAX_DATA_BYTES
         ) -> tuple[Encoded, Fitted, dict] | None:
    """(the rows, how the long ones were made to fit, the meta it was stored with) of entry
    ``name``; None when there is none, or one that is not this user's alone, too large, or
    fails its check."""
    path = folder(cache_dir) / f"{name}.bin"
    try:
        if not path.exists():
            return None
        check_private(path.parent, "cache folder")
        raw = read_regular(path, max_bytes=max_data_bytes * ENTRY_BYTES_PER_DATA_BYTE
                           + MAX_HEADER_BYTES, what="cache entry", private=True)
        return _parse(raw, name)
    except (NotOurs, ValueError, KeyError, TypeError, OSError):
        return None


def _parse(raw: bytes, name: str) -> tuple[Encoded, Fitted, dict]:
    cut = raw.find(b"\n", 0, MAX_HEADER_BYTES)
    if cut < 0:
        raise ValueError("no header")
    head = json.loads(raw[:cut])
    body = memoryview(raw)[cut + 1:]
    tokens, rows = int(head["tokens"]), int(head["rows"])
    if head["format"] != FORMAT or head["key"] != name or tokens < 0 or rows < 0 \
            or len(body) != tokens * 5 + (rows + 1) * 8 or _checksum(body) != head["xxh3_64"]:
        raise ValueError("not this entry, or damaged")
    ids = torch.frombuffer(bytearray(body[: tokens * 4]), dtype=torch.int32) if tokens \
        else torch.empty(0, dtype=torch.int32)
    trained = torch.frombuffer(bytearray(body[tokens * 4: tokens * 5]), dtype=torch.bool) \
        if tokens else torch.empty(0, dtype=torch.bool)
    starts = torch.frombuffer(bytearray(body[tokens * 5:]), dtype=torch.int64)
    if int(starts[0]) != 0 or int(starts[-1]) != tokens or bool((starts[1:] < starts[:-1]).any()) \
            or bool((starts[1:] - starts[:-1] > int(head["seq_len"])).any()):
        raise ValueError("rows out of order")
    rows_of = Encoded(ids, starts, trained, int(head["seq_len"]), int(head["pad_id"]))
    return rows_of, Fitted(**head["fitted"]), head["meta"]


def store(cache_dir: Path, name: str, rows: Encoded, fitted: Fitted, meta: dict) -> Path | None:
    """Entry ``name`` written (atomically); None when the cache folder cannot take it (the
    run goes on: the cache only saves time)."""
    where = folder(cache_dir)
    body = [rows.tokens.to(torch.int32).contiguous().numpy().tobytes(),
            rows.trained.to(torch.bool).contiguous().numpy().tobytes(),
            rows.starts.to(torch.int64).contiguous().numpy().tobytes()]
    head = {"format": FORMAT, "key": name, "tokens": int(rows.tokens.numel()),
            "rows": len(rows), "seq_len": rows.seq_len, "pad_id": rows.pad_id,
            "fitted": asdict(fitted), "meta": meta, "xxh3_64": _checksum(*body)}
    tmp = where / f".{name}.tmp{os.getpid()}"
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_private(where, "cache folder")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(head, separators=(",", ":")).encode() + b"\n")
            for part in body:
                f.write(part)
        os.replace(tmp, where / f"{name}.bin")
    except (OSError, NotOurs):
        tmp.unlink(missing_ok=True)
        return None
    return where / f"{name}.bin"


def _checksum(*parts) -> str:
    import xxhash

    h = xxhash.xxh3_64()
    for part in parts:
        h.update(part)
    return h.hexdigest()
