"""A table of examples read within bounds: a Parquet file, or a folder ``datasets`` wrote.

``--data`` (and ``--eval-data``) may name a Parquet file (``parquet:PATH`` or ``PATH.parquet``)
or a folder written by ``datasets``' ``save_to_disk`` (``datasets:DIR``, or any folder): a
``Dataset``, or a ``DatasetDict``, of which the ``train`` split is read (give ``DIR/test`` for
another split). Each row is one example, of the forms a JSON line takes
(trainer/data/formats.py).

The same bounds as a data file (trainer/datafile.py): the data's bytes within
``--max-data-bytes`` (a Parquet file's on disk and its row groups' uncompressed sizes; a
folder's Arrow files), each row within ``MAX_LINE_BYTES`` of text, regular files only
(``ownership.open_regular``), read a batch of rows at a time. A folder's files are the ones
its ``state.json`` lists, each a plain name inside it. The Arrow files are read with
pyarrow's own stream reader, not ``datasets.load_from_disk``: it memory-maps every file
and follows whatever its JSON names. Torch-free (a shared module: ``submit`` checks a table
as the trainer will read it); pyarrow is imported only when a table is read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from trainer.datafile import MAX_LINE_BYTES
from trainer.errors import UsageError
from trainer.ownership import NotOurs, open_regular, read_regular

PARQUET, DATASETS = "parquet", "datasets"
#: A folder's ``state.json`` or ``dataset_dict.json`` larger than this is not datasets'.
MAX_META_BYTES = 1 << 20
#: Rows turned into Python objects at a time.
ROWS_A_BATCH = 1024
STATE, DICT = "state.json", "dataset_dict.json"


def kind_of(path: Path) -> str | None:
    """``parquet`` for a ``.parquet`` file, ``datasets`` for a folder; None otherwise."""
    path = Path(path)
    if path.suffix == ".parquet":
        return PARQUET
    return DATASETS if path.is_dir() else None


def rows(path: Path, *, max_bytes: int, option: str = "--data",
         kind: str | None = None) -> Iterator[tuple[str, dict]]:
    """Each row of the table at ``path`` as (where it is, for a message; the row as a dict).
    UsageError, one line naming the table, for anything past the bounds or unreadable."""
    path = Path(path)
    kind = kind or kind_of(path)
    if kind == PARQUET:
        yield from _parquet_rows(path, max_bytes, option)
    elif kind == DATASETS:
        yield from _folder_rows(path, max_bytes, option)
    else:
        raise UsageError(f"{option} {path}: neither a .parquet file nor a datasets folder")


def check(path: Path, *, max_bytes: int, option: str = "--data", kind: str | None = None
          ) -> None:
    """Read the table through as the trainer will, keeping nothing: UsageError as ``rows``."""
    for _ in rows(path, max_bytes=max_bytes, option=option, kind=kind):
        pass


def files(path: Path, kind: str | None = None, option: str = "--data") -> list[Path]:
    """The files whose bytes are the table, in order: what its digest covers."""
    path = Path(path)
    if (kind or kind_of(path)) == PARQUET:
        return [path]
    folder = split_folder(path, option)
    return [folder / STATE, *_data_files(folder, option)]


# === Parquet ================================================================


def _parquet_rows(path: Path, max_bytes: int, option: str) -> Iterator[tuple[str, dict]]:
    pq = _pyarrow(path, option).parquet
    with _opened(path, max_bytes, option) as f:
        try:
            table = pq.ParquetFile(f)
            meta = table.metadata
            unpacked = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        except Exception as exc:  # noqa: BLE001 - whatever pyarrow makes of a bad footer
            raise UsageError(f"{option} {path}: not a Parquet file pyarrow can read "
                             f"({_first_line(exc)})") from None
        if unpacked > max_bytes:
            raise UsageError(f"{option} {path}: {unpacked:,} bytes once uncompressed, past "
                             f"--max-data-bytes {max_bytes:,}")
        yield from _batch_rows(table.iter_batches(batch_size=ROWS_A_BATCH), path,
                               _Budget(max_bytes), option)


# === datasets' save_to_disk folders ============================================


def split_folder(path: Path, option: str = "--data") -> Path:
    """The folder of the ``Dataset`` that ``path`` names: itself, or a DatasetDict's
    ``train`` split."""
    if not (path / DICT).exists():
        if not (path / STATE).exists():
            raise UsageError(f"{option} {path}: a folder without {STATE} or {DICT}: not one "
                             "that datasets' save_to_disk wrote")
        return path
    splits = _json(path / DICT, option).get("splits")
    if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
        raise UsageError(f"{option} {path}: {DICT} lists no splits")
    if "train" not in splits:
        raise UsageError(f"{option} {path}: a DatasetDict without a train split; give one of "
                         f"its splits' folders ({', '.join(str(path / s) for s in splits)})")
    return path / _plain_name("train", path, option)


def _data_files(folder: Path, option: str) -> list[Path]:
    listed = _json(folder / STATE, option).get("_data_files")
    if not isinstance(listed, list) or not listed:
        raise UsageError(f"{option} {folder}: its {STATE} lists no data files")
    names = [entry.get("filename") if isinstance(entry, dict) else None for entry in listed]
    return [folder / _plain_name(name, folder, option) for name in names]


def _plain_name(name, folder: Path, option: str) -> str:
    """A file name inside ``folder``: never a path out of it."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name \
            or "\\" in name or "\0" in name:
        raise UsageError(f"{option} {folder}: {STATE} names {name!r}, not a file in the folder")
    return name


def _folder_rows(path: Path, max_bytes: int, option: str) -> Iterator[tuple[str, dict]]:
    folder = split_folder(path, option)
    data = _data_files(folder, option)
    total = 0
    for name in data:
        try:
            total += os.stat(name).st_size
        except OSError as exc:
            raise UsageError(f"{option} {name}: {exc.strerror}") from None
    if total > max_bytes:
        raise UsageError(f"{option} {folder}: {total:,} bytes of Arrow files, past "
                         f"--max-data-bytes {max_bytes:,} (give a larger --max-data-bytes)")
    ipc = _pyarrow(path, option).ipc
    budget = _Budget(max_bytes)  # one for all the files
    for name in data:
        with _opened(name, max_bytes, option) as f:
            try:
                reader = ipc.open_stream(f)
            except Exception as exc:  # noqa: BLE001 - whatever pyarrow makes of the bytes
                raise UsageError(f"{option} {name}: not an Arrow stream datasets wrote "
                                 f"({_first_line(exc)})") from None
            yield from _batch_rows(reader, name, budget, option)


# === both =====================================================================


class _Budget:
    """The bytes of data still allowed (``--max-data-bytes``), over every file of a table."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.left = max_bytes, max_bytes

    def spend(self, n: int, path: Path, option: str) -> None:
        self.left -= n
        if self.left < 0:
            raise UsageError(f"{option} {path}: more than --max-data-bytes {self.max_bytes:,} "
                             "of data once read")


def _batch_rows(batches, path: Path, budget: _Budget, option: str):
    """The rows of pyarrow record ``batches``, each checked against ``MAX_LINE_BYTES`` and
    all of them against the ``budget`` (what the batches hold in memory)."""
    n = 0
    try:
        for batch in batches:
            budget.spend(batch.nbytes, path, option)
            for row in batch.to_pylist():
                n += 1
                size = _text_bytes(row)
                if size > MAX_LINE_BYTES:
                    raise UsageError(f"{path} row {n}: {size:,} bytes of text, more than one "
                                     f"example holds ({MAX_LINE_BYTES:,})")
                yield f"{path} row {n}", row
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - a corrupt page, a string that is not UTF-8
        raise UsageError(f"{option} {path}: unreadable after row {n} "
                         f"({_first_line(exc)})") from None


def _text_bytes(value, depth: int = 0) -> int:
    """The UTF-8 bytes of the text in a row (its strings, nested lists and objects)."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if depth > 32:  # no example nests so deep: count it past any bound
        return MAX_LINE_BYTES + 1
    if isinstance(value, dict):
        return sum(_text_bytes(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_text_bytes(v, depth + 1) for v in value)
    return 0


class _opened:
    """A regular file (a link the user made followed), within ``max_bytes`` on disk, as a
    Python file object for pyarrow."""

    def __init__(self, path: Path, max_bytes: int, option: str):
        self.path, self.max_bytes, self.option = path, max_bytes, option

    def __enter__(self):
        try:
            fd = open_regular(self.path, what="data file", follow=True)
        except NotOurs as exc:
            raise UsageError(f"{self.option} {exc}") from None
        size = os.fstat(fd).st_size
        if size > self.max_bytes:
            os.close(fd)
            raise UsageError(f"{self.option} {self.path}: {size:,} bytes, past --max-data-bytes "
                             f"{self.max_bytes:,} (give a larger --max-data-bytes to read it)")
        self.file = os.fdopen(fd, "rb")
        return self.file

    def __exit__(self, *exc) -> None:
        self.file.close()


def _json(path: Path, option: str) -> dict:
    try:
        value = json.loads(read_regular(path, max_bytes=MAX_META_BYTES, what="datasets file",
                                        follow=True))
    except NotOurs as exc:
        raise UsageError(f"{option} {exc}") from None
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested past any of its own
        raise UsageError(f"{option} {path}: not JSON") from None
    if not isinstance(value, dict):
        raise UsageError(f"{option} {path}: not a JSON object")
    return value


def _pyarrow(path: Path, option: str):
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise UsageError(f"{option} {path}: reading Parquet and datasets folders needs pyarrow "
                         "(the trainer extra: pip install 'rngdctl[trainer]')") from None
    return pyarrow


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
