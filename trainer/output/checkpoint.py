"""Checkpoints: everything a run needs to go on exactly where it stopped.

``OUT/checkpoints/step-<N>/`` (N: the main pass's steps done) holds

- ``<pass>.safetensors`` for each pass still training (``main``, and
  ``baseline`` while it runs): every master and its AdamW state, by names
  that do not depend on the placement (LayerEngine.state_tensors);
- ``manifest.json``, written last: the run and the home that wrote it (its
  owner), each of those files' size and xxh3_64 checksum (trainer/output/weights.py
  says why not sha256), the passes' positions (steps done, so the data
  stream, the schedule and the interleaving order go on from there), their
  ``start`` configs and losses so far, the config that must match to
  resume, torch's random state, and a checksum of all that.

A checkpoint is written into a temporary folder, each weights file fsynced
(its writeback started as it is written, so the fsync waits for the tail),
the folder renamed into place, and only then the manifest written and
fsynced with the folders above it. A folder without a manifest is
incomplete and never read; one whose files do not match their manifest is
refused before a single tensor is copied. The oldest complete checkpoints
of this run past ``keep`` are deleted only once a new one is complete, and
nothing else in ``checkpoints/`` is ever deleted but the temporary folders
of this writer's naming.

Each fsync costs the disk a journal commit and a cache flush, and on a busy
shared disk a commit can wait tens of milliseconds: the state and the random
state travel in the manifest rather than in files of their own, so that a
checkpoint of one pass waits on the disk twice (its weights, its manifest)
where a save and an fsync wait once. A manifest torn by a crash does not
parse, so it needs no temporary name; one left in the temporary folder by a
crash before the rename is never read either.

A checkpoint is read as a file another user may have planted or a crash
may have cut (trainer/output/manifest.py checks the manifest's form): its folder
and files must be this user's and no one else's to write (0700 and 0600 as
written), every file is opened only when it is a regular file (never a
FIFO, a device or a symbolic link), and every error, safetensors' own
included, is one line naming the file (CheckpointError).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from trainer import ownership
from trainer.errors import TrainerError, UsageError
from trainer.output import manifest as manifest_form
from trainer.output import weights
from trainer.output.weights import Entry
from trainer.ownership import NotOurs, OtherUsers, Owner

CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
#: 3: the manifest names its owner (format 2 did not; such a checkpoint is not resumed).
FORMAT = 3
PREFIX = "step-"
CHECKSUM = weights.XXH3
#: A manifest larger than this is not one the trainer wrote (one holds a loss per step:
#: 100,000 steps are about 2 MB): it is refused unread.
MAX_MANIFEST_BYTES = ownership.MAX_JSON_BYTES
#: The temporary folders ``write`` makes: ``.step-N.tmp-PID`` (being written) and
#: ``.step-N.old-PID`` (the checkpoint of the same name it replaces). ``prune`` removes
#: these and this run's own checkpoints, nothing else.
TEMPORARY = re.compile(r"\.step-\d+\.(tmp|old)-\d+")
#: A checkpoint's folders and files: no one else's to read or write.
FOLDER_MODE, FILE_MODE = 0o700, 0o600


class CheckpointError(UsageError):
    """A checkpoint that cannot be resumed from: one line naming the file and the reason."""


class ForeignCheckpoint(CheckpointError):
    """A checkpoint of another user, run or home: never this run's own, so ``auto`` passes
    it over without counting it as a checkpoint of this run that failed."""


class CheckpointWriteError(TrainerError):
    """A checkpoint could not be written (a full disk): the one before it is kept."""


@dataclass
class Checkpoint:
    """A complete checkpoint whose files matched their manifest when it was read."""

    path: Path
    manifest: dict
    #: each file's (st_dev, st_ino) as verified: a file opened later must still be it.
    identity: dict[str, tuple[int, int]]

    @property
    def state(self) -> dict:
        return self.manifest["state"]

    @property
    def owner(self) -> Owner:
        return owner_of(self.manifest)

    @property
    def position(self) -> dict[str, int]:
        return {label: p["steps_done"] for label, p in self.state["passes"].items()}

    @property
    def step(self) -> int:
        return int(self.state["step"])

    @contextmanager
    def tensors(self, file: str) -> Iterator[Callable[[str], torch.Tensor]]:
        """A fetch(name) over one of its safetensors files, open for the block."""
        path = self.path / file
        with self._open(file) as f:
            def fetch(name: str) -> torch.Tensor:
                try:
                    return f.get_tensor(name)
                except _SAFETENSORS_ERRORS as exc:
                    raise CheckpointError(f"{path}: {name}: {_first_line(exc)}") from None
            yield fetch

    def layout(self, file: str) -> dict[str, tuple[tuple[int, ...], str]]:
        """(shape, safetensors dtype name) of every tensor in one of its files."""
        path = self.path / file
        with self._open(file) as f:
            try:
                names = f.keys()  # a safe_open handle is not iterable
                slices = {name: f.get_slice(name) for name in names}
                return {name: (tuple(part.get_shape()), part.get_dtype())
                        for name, part in slices.items()}
            except _SAFETENSORS_ERRORS as exc:
                raise CheckpointError(f"{path}: {_first_line(exc)}") from None

    @contextmanager
    def _open(self, file: str):
        """safe_open of one of the files ``verify`` checked, and only while it is that file
        (safe_open takes a name: it would follow a link or block on a FIFO)."""
        path = self.path / file
        if file not in self.identity:
            raise CheckpointError(f"{path}: not one of the files its {MANIFEST} lists")
        try:
            st = os.lstat(path)
        except OSError as exc:
            raise CheckpointError(f"{path}: {exc.strerror}") from None
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != self.identity[file]:
            raise CheckpointError(f"{path}: replaced since it was verified")
        try:
            handle = safe_open(str(path), framework="pt")
        except _SAFETENSORS_ERRORS as exc:
            raise CheckpointError(f"{path}: not a safetensors file the trainer reads "
                                  f"({_first_line(exc)})") from None
        with handle as f:
            yield f


#: What safetensors raises for a file it cannot read: safe_open checks the header and the
#: offsets as it opens; a dtype torch has not comes up as a TypeError or a RuntimeError.
_SAFETENSORS_ERRORS = (SafetensorError, OSError, ValueError, TypeError, RuntimeError)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def root(out: Path) -> Path:
    return Path(out) / CHECKPOINTS


def owner_of(manifest: dict) -> Owner:
    """The run and home a (checked) manifest names."""
    owner = manifest["owner"]
    return Owner(owner["run_id"], owner["home_id"])


def whose(owner: Owner) -> str:
    """Whose checkpoint it is, in words: ``run 3 of rngdctl home 1f2e``."""
    run = "no run id" if owner.run_id is None else f"run {owner.run_id}"
    if owner.home_id is None:
        return f"a trainer started by hand ({run})"
    return f"{run} of rngdctl home {owner.home_id}"


def foreign(path: Path, theirs: Owner, ours: Owner) -> str | None:
    """Why a checkpoint of ``theirs`` is not ``ours`` to go on from, or None when it is."""
    if (theirs.run_id, theirs.home_id) == (ours.run_id, ours.home_id):
        return None
    return f"{path}: a checkpoint of {whose(theirs)}, not of this run ({whose(ours)})"


# === writing =================================================================


def write(out: Path, name: str, files: dict[str, dict[str, torch.Tensor]], state: dict,
          keep: int, *, owner: Owner) -> tuple[Path, int]:
    """Write checkpoint ``name`` of ``owner`` atomically; returns (its folder, its bytes).

    Raises CheckpointWriteError (one line) when it cannot be written; nothing
    of it is left behind then, and every checkpoint before it is kept. A
    folder of the same name that is not a checkpoint of this run is left as
    it is, and this checkpoint is not written.
    """
    folder = root(out)
    tmp = folder / f".{name}.tmp-{os.getpid()}"
    final = folder / name
    renamed = False
    try:
        folder.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
        in_the_way = _not_replaceable(final, owner)
        if in_the_way is not None:
            raise CheckpointWriteError(f"checkpoint {name} not written: {in_the_way}; "
                                       f"{_kept(out, owner)}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=FOLDER_MODE)
        listing = {}
        for file, tensors in files.items():
            digest, size = weights.write_file(tmp / file,
                                              [Entry.of(k, v) for k, v in tensors.items()],
                                              checksum=CHECKSUM, mode=FILE_MODE)
            listing[file] = {CHECKSUM: digest, "bytes": size}
        old = _out_of_the_way(final)
        os.rename(tmp, final)
        renamed = True
        body = {"format": FORMAT, "name": name,
                "owner": {"run_id": owner.run_id, "home_id": owner.home_id},
                "files": listing, "state": state, "rng": _encode_rng(rng_state()),
                "time": time.time()}
        size = _write_manifest(final / MANIFEST, body)
        weights.fsync_dir(final)
        weights.fsync_dir(folder)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if renamed and not os.path.lexists(final / MANIFEST):
            shutil.rmtree(final, ignore_errors=True)  # renamed, but its manifest failed
        raise CheckpointWriteError(
            f"checkpoint {name} not written: {exc.strerror or exc} "
            f"({exc.filename or folder}); {_kept(out, owner)}") from None
    prune(out, keep, owner)
    return final, size + sum(f["bytes"] for f in listing.values())


def _kept(out: Path, owner: Owner) -> str:
    kept = [p.name for p in ours(out, owner)]
    return f"{kept[-1]} kept" if kept else "no earlier checkpoint to keep"


def _not_replaceable(final: Path, owner: Owner) -> str | None:
    """Why the folder at ``final`` may not be replaced, or None (nothing there, or a
    checkpoint of this run: a run resumed from an older one writes it again)."""
    if not os.path.lexists(final):
        return None
    try:
        theirs = owner_of(read_manifest(final))
    except CheckpointError as exc:
        return f"{final} is there and is not a complete checkpoint ({exc})"
    return foreign(final, theirs, owner)


def _out_of_the_way(final: Path) -> Path | None:
    """This run's earlier checkpoint of the same name moves aside until the new one is in
    place."""
    if not os.path.lexists(final):
        return None
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    shutil.rmtree(old, ignore_errors=True)
    os.rename(final, old)
    return old


def _body_digest(body: dict) -> str:
    digest = weights.new_digest(CHECKSUM)
    digest.update(json.dumps(body, sort_keys=True).encode())
    return digest.hexdigest()


def _write_manifest(path: Path, body: dict) -> int:
    """The manifest, with the checksum of its own body, written and fsynced; its bytes."""
    body = json.loads(json.dumps(body))  # the body as a reader will parse it, to checksum
    data = json.dumps({**body, CHECKSUM: _body_digest(body)}, indent=1).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return len(data)


def rng_state() -> dict[str, torch.Tensor]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            state[f"cuda.{i}"] = s
    return state


def _encode_rng(state: dict[str, torch.Tensor]) -> dict[str, str]:
    return {name: base64.b64encode(t.numpy().tobytes()).decode() for name, t in state.items()}


def restore_rng(ckpt: Checkpoint) -> None:
    """torch's random state as the checkpoint recorded it (its form checked when read)."""
    def tensor(name: str) -> torch.Tensor:
        return torch.frombuffer(bytearray(base64.b64decode(ckpt.manifest["rng"][name])),
                                dtype=torch.uint8)

    where = ckpt.path / MANIFEST
    try:
        torch.set_rng_state(tensor("torch"))
        for name in ckpt.manifest["rng"]:
            if name.startswith("cuda.") and torch.cuda.is_available() \
                    and int(name[5:]) < torch.cuda.device_count():
                torch.cuda.set_rng_state(tensor(name), int(name[5:]))
    except (RuntimeError, ValueError) as exc:  # a card's state of another size
        raise CheckpointError(f"{where}: its random state cannot be restored "
                              f"({_first_line(exc)})") from None


def order_of(state: dict) -> int:
    """Where a checkpoint lies in its run: optimizer steps done, every pass together."""
    return sum(p["steps_done"] for p in state["passes"].values())


# === finding and reading =====================================================


@dataclass
class _Found:
    """A ``step-*`` entry under checkpoints/ with a manifest: read, or why it cannot be."""

    path: Path
    manifest: dict | None
    error: CheckpointError | None = None

    @property
    def order(self) -> tuple[float, float]:
        if self.manifest is None:  # unreadable: tried (and reported) before any readable one
            return (float("inf"), 0.0)
        return (order_of(self.manifest["state"]), float(self.manifest["time"]))


def _found(out: Path) -> list[_Found]:
    """Every ``step-*`` entry that is not incomplete, oldest first (not yet verified).

    Incomplete, and never read: a folder without a manifest, or with one torn
    by a crash (it does not parse). Any other entry whose manifest cannot be
    read is kept, with why, so that it is reported rather than ignored.
    """
    folder = root(out)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    found = []
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False) and not os.path.lexists(path / MANIFEST):
            continue  # incomplete: it was being written when the trainer stopped
        try:
            found.append(_Found(path, read_manifest(path)))
        except _Torn:
            continue
        except CheckpointError as exc:
            found.append(_Found(path, None, exc))
    return sorted(found, key=lambda f: f.order)


def complete(out: Path) -> list[Path]:
    """Checkpoint folders with a readable manifest, oldest first (not yet verified)."""
    return [f.path for f in _found(out) if f.manifest is not None]


def ours(out: Path, owner: Owner) -> list[Path]:
    """The complete checkpoints whose manifest names ``owner``, oldest first."""
    return [f.path for f in _found(out)
            if f.manifest is not None and foreign(f.path, owner_of(f.manifest), owner) is None]


class _Torn(CheckpointError):
    """A manifest that does not parse: torn by a crash while it was written."""


def _check_folder(path: Path) -> None:
    try:
        st = os.lstat(path)
    except OSError:
        raise CheckpointError(f"{path}: no checkpoint folder there") from None
    if stat.S_ISLNK(st.st_mode):
        raise CheckpointError(f"{path}: a symbolic link, not a checkpoint folder")
    if not stat.S_ISDIR(st.st_mode):
        raise CheckpointError(f"{path}: no checkpoint folder there")
    _private(path, st, "checkpoint")


def _private(path: Path, st: os.stat_result, what: str) -> None:
    """``path`` (its stat ``st``) is this user's, and no one else may write it."""
    try:
        ownership.check_stat(path, st, what)
    except OtherUsers as exc:
        raise ForeignCheckpoint(str(exc)) from None
    except NotOurs as exc:
        raise CheckpointError(str(exc)) from None


def read_manifest(path: Path) -> dict:
    """The manifest of the checkpoint folder ``path``: a private regular file of at most
    MAX_MANIFEST_BYTES, of this format, matching its own checksum, its values of the
    right types and agreeing with each other; else one line (CheckpointError)."""
    _check_folder(path)
    manifest_path = path / MANIFEST
    if not os.path.lexists(manifest_path):
        raise CheckpointError(f"{path}: incomplete, no {MANIFEST} (the trainer stopped while "
                              f"writing it)")
    try:
        data = ownership.read_regular(manifest_path, max_bytes=MAX_MANIFEST_BYTES,
                                      what="checkpoint manifest", private=True)
    except OtherUsers as exc:
        raise ForeignCheckpoint(str(exc)) from None
    except NotOurs as exc:
        raise CheckpointError(str(exc)) from None
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):
        raise _Torn(f"{manifest_path}: not a checkpoint manifest (not JSON: torn by a crash "
                    f"while it was written?)") from None
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{manifest_path}: not a checkpoint manifest (not a JSON object)")
    digest = manifest.pop(CHECKSUM, None)
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{manifest_path}: format {manifest.get('format')!r}, this "
                              f"trainer reads {FORMAT}")
    if _body_digest(manifest) != digest:
        raise CheckpointError(f"{manifest_path}: fails its checksum ({CHECKSUM} of its body "
                              f"differs from the one it records)")
    try:
        manifest_form.check(manifest)
    except manifest_form.Invalid as exc:
        raise CheckpointError(f"{manifest_path}: {exc}") from None
    return manifest


def verify(path: Path) -> Checkpoint:
    """The checkpoint at ``path``, its files checked against the manifest; else one line."""
    path = Path(path)
    return verify_files(path, read_manifest(path))


def verify_files(path: Path, manifest: dict) -> Checkpoint:
    """Each file the (read) manifest lists: a private regular file of its size and
    checksum, read once, from one open file (the disk-bound pass a resume costs)."""
    identity = {}
    for name, info in manifest["files"].items():
        file = path / name
        if not os.path.lexists(file):
            raise CheckpointError(f"{file}: missing")
        try:
            fd = ownership.open_regular(file, what="checkpoint file")
            st = os.fstat(fd)
        except NotOurs as exc:
            raise CheckpointError(str(exc)) from None
        try:
            _private(file, st, "checkpoint file")
            if st.st_size != info["bytes"]:
                raise CheckpointError(
                    f"{file}: truncated ({st.st_size} of {info['bytes']} bytes)"
                    if st.st_size < info["bytes"] else
                    f"{file}: {st.st_size} bytes, the manifest says {info['bytes']}")
            digest = weights.fd_digest(fd, CHECKSUM)
        except OSError as exc:
            raise CheckpointError(f"{file}: {exc.strerror}") from None
        finally:
            os.close(fd)
        if digest != info[CHECKSUM]:
            raise CheckpointError(f"{file}: fails its checksum ({CHECKSUM} differs from "
                                  f"{MANIFEST}'s)")
        identity[name] = (st.st_dev, st.st_ino)
    return Checkpoint(path, manifest, identity)


def newest(out: Path, owner: Owner, on_bad: Callable[[Path, str], None],
           accept: Callable[[Checkpoint], None] = lambda ckpt: None) -> Checkpoint | None:
    """The newest checkpoint of ``owner`` that verifies and that ``accept`` does not refuse
    (a CheckpointError); ``on_bad`` hears of each newer one passed over.

    None when there is none of this run's own; CheckpointError (the newest's
    reason) when there are some and none can be resumed from. Another user's,
    run's or home's checkpoint is passed over and never counted: it is not
    this run's to go on from, nor a reason to stop.
    """
    first_error = None
    for found in reversed(_found(out)):
        try:
            if found.error is not None:
                raise found.error
            why = foreign(found.path, owner_of(found.manifest), owner)
            if why is not None:
                raise ForeignCheckpoint(why)
            ckpt = verify_files(found.path, found.manifest)
            accept(ckpt)
            return ckpt
        except ForeignCheckpoint as exc:
            on_bad(found.path, str(exc))
        except CheckpointError as exc:
            first_error = first_error or exc
            on_bad(found.path, str(exc))
    if first_error is not None:
        raise CheckpointError(f"no checkpoint under {root(out)} can be resumed from; the "
                              f"newest: {first_error}")
    return None


def check_layout(ckpt: Checkpoint, file: str,
                 expected: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> None:
    """Every tensor the engine needs is in ``file`` with its shape and dtype; else one line."""
    have = ckpt.layout(file)
    for name, (shape, dtype) in expected.items():
        if name not in have:
            raise CheckpointError(f"{ckpt.path / file}: has no {name} (another model)")
        if have[name] != (shape, weights.DTYPES[dtype]):
            got_shape, got_dtype = have[name]
            raise CheckpointError(f"{ckpt.path / file}: {name} is {list(got_shape)} {got_dtype}, "
                                  f"this model's is {list(shape)} {weights.DTYPES[dtype]} "
                                  f"(another model)")
    extra = sorted(set(have) - set(expected))
    if extra:
        raise CheckpointError(f"{ckpt.path / file}: holds {extra[0]}, which this model has "
                              f"not (another model)")


def prune(out: Path, keep: int, owner: Owner) -> None:
    """Keep the newest ``keep`` complete checkpoints of ``owner``; remove its older ones and
    this writer's temporary folders. Nothing else under checkpoints/ is touched: another
    run's checkpoints, an incomplete folder, anything a user put there."""
    done = ours(out, owner)
    for path in done[:-keep] if keep > 0 else done:
        shutil.rmtree(path, ignore_errors=True)
    me = os.geteuid()
    for entry in os.scandir(root(out)):
        if TEMPORARY.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False) \
                and entry.stat(follow_symlinks=False).st_uid == me:
            shutil.rmtree(entry.path, ignore_errors=True)  # a stopped writer's
