"""Safetensors files written one tensor at a time, hashed as they are written.

``safetensors.torch.save_file`` takes every tensor at once and copies each
into a bytes object before writing: a save holds a second copy of the whole
model. Here a file is planned from the tensors' shapes alone (the format's
header is the names, dtypes, shapes and byte offsets), and each tensor is
fetched only when its turn comes, written from its own memory, and dropped:
a layer on a card costs one host copy of one tensor at a time, a master on
the host costs nothing. The sha256 of each file is computed from the same
bytes on the way out, so a file is never read back to be checked.

The checksum is computed from the same memory the write reads, while the
file is written. Two kinds: ``sha256`` for the saved model (what ``sha256sum``
checks; 1.4-1.6 GB/s with SHA-NI, slower than a write into the page cache at
3-4 GB/s, so it runs in a second thread and a save costs what the hash does)
and ``xxh3_64`` for a checkpoint's manifest (8-16 GB/s, in line: an integrity
check that never bounds a checkpoint's time; no defence against tampering,
which a checkpoint does not need).

The format (https://github.com/huggingface/safetensors, "Format"): 8 bytes of
little-endian header length N, N bytes of JSON (padded with spaces to a
multiple of 8), then the tensors' bytes, C-ordered, little-endian, in the
order of their offsets. Read back with ``safetensors.safe_open``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import queue
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer import ownership

#: torch dtype -> the format's name for it.
DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}

#: transformers' default shard size: a model past it is written in several files.
MAX_SHARD_BYTES = 5 * 1000 ** 3

#: The checksums a file can carry (see the module's docstring).
SHA256, XXH3 = "sha256", "xxh3_64"

#: A tensor on a card comes to the host in pieces of this size: what a save holds of it.
DEVICE_CHUNK_BYTES = 16 << 20
#: Pieces written but not yet hashed: the hash may fall this far behind the write.
HASH_QUEUE = 2
#: A file written to be fsynced hands its bytes to the disk every this many bytes as it goes,
#: so the disk works while the rest is written and the final fsync waits for the tail only.
WRITEBACK_BYTES = 16 << 20

#: Fault injection for tests of a full disk: "NAME:K" makes the K-th file (1-based) whose
#: name starts with NAME, under one output folder, fail with ENOSPC after its header, as a
#: disk that filled would.
INJECT_ENOSPC_ENV = "RNGDCTL_TRAINER_INJECT_ENOSPC"
_injected: dict[tuple[str, str], int] = {}


@dataclass(frozen=True)
class Entry:
    """One tensor of a file: its name and shape, and how to get its host copy when written."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    fetch: Callable[[], torch.Tensor]

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.dtype).element_size()

    @classmethod
    def of(cls, name: str, tensor: torch.Tensor) -> Entry:
        """An entry for a tensor that exists now (on the host or a card)."""
        return cls(name, tuple(tensor.shape), tensor.dtype, lambda t=tensor: t)


def _header(entries: list[Entry], metadata: dict[str, str] | None) -> bytes:
    head: dict = {"__metadata__": {"format": "pt", **(metadata or {})}}
    offset = 0
    for e in entries:
        if e.dtype not in DTYPES:
            raise TypeError(f"{e.name}: dtype {e.dtype} has no safetensors name")
        head[e.name] = {"dtype": DTYPES[e.dtype], "shape": list(e.shape),
                        "data_offsets": [offset, offset + e.nbytes]}
        offset += e.nbytes
    text = json.dumps(head, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _host_bytes(entry: Entry) -> Iterator[memoryview]:
    """The entry's bytes: its own memory when it is on the host (no copy), else pieces of
    DEVICE_CHUNK_BYTES copied from the card one at a time."""
    tensor = entry.fetch().detach()
    if tuple(tensor.shape) != entry.shape or tensor.dtype != entry.dtype:
        raise ValueError(f"{entry.name}: planned {entry.shape} {entry.dtype}, "
                         f"got {tuple(tensor.shape)} {tensor.dtype}")
    flat = tensor.contiguous().reshape(-1)
    if not flat.numel():
        return
    if flat.device.type == "cpu":
        yield memoryview(flat.view(torch.uint8).numpy())
        return
    step = max(1, DEVICE_CHUNK_BYTES // flat.element_size())
    for start in range(0, flat.numel(), step):
        piece = flat[start: start + step].to("cpu")
        yield memoryview(piece.view(torch.uint8).numpy())


def new_digest(kind: str):
    """A fresh hash object of ``kind`` (SHA256 or XXH3)."""
    if kind == SHA256:
        return hashlib.sha256()
    if kind == XXH3:
        import xxhash

        return xxhash.xxh3_64()
    raise ValueError(f"no checksum {kind!r}")


#: Whether a checksum runs in a thread beside the write. sha256 is slower than a write into
#: the page cache, so the second core halves a save; xxh3_64 costs a tenth of the write in line,
#: and beside it the write itself ran 2-3x slower in 4 of 10 rounds of a checkpoint
#: (experiments/2026-12-03-checkpoint-fsyncs.md).
BESIDE = {SHA256: True, XXH3: False}


class _Hasher(threading.Thread):
    """The checksum of the pieces put to it, in order: in a thread beside the writer (hashlib
    lets go of the GIL for a large buffer, as a file write does) or in line (BESIDE)."""

    def __init__(self, first: bytes, kind: str = SHA256):
        super().__init__(daemon=True, name=f"weights-{kind}")
        self.digest = new_digest(kind)
        self.digest.update(first)
        self.beside = BESIDE[kind]
        self.pieces: queue.Queue = queue.Queue(maxsize=HASH_QUEUE)

    def start(self) -> None:
        if self.beside:
            super().start()

    def put(self, piece: memoryview) -> None:
        if self.beside:
            self.pieces.put(piece)
        else:
            self.digest.update(piece)

    def run(self) -> None:
        while (piece := self.pieces.get()) is not None:
            self.digest.update(piece)

    def hexdigest(self) -> str:
        if self.beside:
            self.pieces.put(None)
            self.join()
        return self.digest.hexdigest()


def write_file(path: Path, entries: Iterable[Entry], metadata: dict[str, str] | None = None,
               *, fsync: bool = True, checksum: str = SHA256, mode: int = 0o666,
               ) -> tuple[str, int]:
    """Write ``entries`` to ``path`` as one safetensors file; returns (its ``checksum`` in
    hex, bytes). ``mode``: the new file's, less the umask (a checkpoint's is 0600).

    The file is written under its own name: callers that need it to appear
    whole write into a temporary folder or name and rename.
    """
    entries = list(entries)
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ValueError("two tensors share a name")
    head = _header(entries, metadata)
    hasher = _Hasher(head, checksum)
    hasher.start()
    size = handed = len(head)
    try:
        with open(path, "wb", opener=_opener(mode)) as f:  # buffered: a large piece whole
            f.write(head)
            _maybe_fail(path)
            for e in entries:
                for piece in _host_bytes(e):
                    hasher.put(piece)  # hashed while it is written
                    f.write(piece)
                    size += len(piece)
                    if fsync and size - handed >= WRITEBACK_BYTES:
                        f.flush()
                        _start_writeback(f.fileno(), handed, size - handed)
                        handed = size
            f.flush()
            if fsync:
                os.fsync(f.fileno())
    finally:
        digest = hasher.hexdigest()
    return digest, size


def _opener(mode: int):
    """open()'s opener for a new file of ``mode`` that is never a final symbolic link."""
    def opener(path, flags):
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    return opener


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing a range of the file to the disk, without waiting for it.

    Linux's POSIX_FADV_DONTNEED submits a range's dirty pages for writeback
    (and drops the clean ones, which a checkpoint does not read again); it is
    os's portable way to what sync_file_range(SYNC_FILE_RANGE_WRITE) does.
    Elsewhere it is a hint: the final fsync still makes the file durable.
    """
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def _maybe_fail(path: Path) -> None:
    spec = os.environ.get(INJECT_ENOSPC_ENV, "")
    if not spec:
        return
    prefix, _, nth = spec.rpartition(":")
    if not path.name.startswith(prefix):
        return
    key = (spec, str(path.resolve().parents[1]))  # per output folder, not per process
    _injected[key] = _injected.get(key, 0) + 1
    if _injected[key] == int(nth):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def shards(entries: list[Entry], max_bytes: int = MAX_SHARD_BYTES) -> list[list[Entry]]:
    """Entries cut into files of at most ``max_bytes`` each (a bigger tensor alone), in order."""
    out: list[list[Entry]] = [[]]
    size = 0
    for e in entries:
        if out[-1] and size + e.nbytes > max_bytes:
            out.append([])
            size = 0
        out[-1].append(e)
        size += e.nbytes
    return out


def file_digest(path: Path, kind: str = SHA256, chunk: int = 16 << 20, *,
                follow_symlinks: bool = False) -> str:
    """The checksum of a regular file as it is on disk.

    A FIFO or a device is never opened for reading (it could block or never
    end), and a final symbolic link is followed only when asked: the user's
    own inputs (a model folder from a hub cache links its files), never a
    file rngdctl wrote. Anything else raises NotOurs (trainer/ownership.py).
    """
    if follow_symlinks:
        path = Path(os.path.realpath(path))
    fd = ownership.open_regular(path)
    try:
        return fd_digest(fd, kind, chunk)
    finally:
        os.close(fd)


def fd_digest(fd: int, kind: str = SHA256, chunk: int = 16 << 20) -> str:
    """The checksum of an open file from its current offset to its end."""
    digest = new_digest(kind)
    while block := os.read(fd, chunk):
        digest.update(block)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
