"""Checkpoints: everything a run needs to go on exactly where it stopped.

``OUT/checkpoints/step-<N>/`` (N: the main pass's steps done) holds

- ``<pass>.safetensors`` for each pass still training (``main``, and
  ``baseline`` while it runs): every master and its AdamW state, by names
  that do not depend on the placement (LayerEngine.state_tensors);
- ``manifest.json``, written last: each of those files' size and xxh3_64
  checksum (trainer/weights.py says why not sha256), the passes' positions
  (steps done, so the data stream, the schedule and the interleaving order go
  on from there), their ``start`` configs and losses so far, the config that
  must match to resume, torch's random state, and a checksum of all that.

A checkpoint is written into a temporary folder, each weights file fsynced
(its writeback started as it is written, so the fsync waits for the tail),
the folder renamed into place, and only then the manifest written and
fsynced with the folders above it. A folder without a manifest is
incomplete and never read; one whose files do not match their manifest is
refused before a single tensor is copied. The oldest complete checkpoints
past ``keep`` are deleted only once a new one is complete.

Each fsync costs the disk a journal commit and a cache flush, and on a busy
shared disk a commit can wait tens of milliseconds: the state and the random
state travel in the manifest rather than in files of their own, so that a
checkpoint of one pass waits on the disk twice (its weights, its manifest)
where a save and an fsync wait once. A manifest torn by a crash does not
parse, so it needs no temporary name; one left in the temporary folder by a
crash before the rename is never read either.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer import weights
from trainer.errors import TrainerError, UsageError
from trainer.weights import Entry

CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
FORMAT = 2
PREFIX = "step-"
CHECKSUM = weights.XXH3


class CheckpointError(UsageError):
    """A checkpoint that cannot be resumed from: one line naming the file and the reason."""


class CheckpointWriteError(TrainerError):
    """A checkpoint could not be written (a full disk): the one before it is kept."""


@dataclass
class Checkpoint:
    """A complete checkpoint whose files matched their manifest when it was read."""

    path: Path
    manifest: dict

    @property
    def state(self) -> dict:
        return self.manifest["state"]

    @property
    def position(self) -> dict[str, int]:
        return {label: p["steps_done"] for label, p in self.state["passes"].items()}

    @property
    def step(self) -> int:
        return int(self.state["step"])

    @contextmanager
    def tensors(self, file: str) -> Iterator[Callable[[str], torch.Tensor]]:
        """A fetch(name) over one of its safetensors files, open for the block."""
        from safetensors import safe_open

        with safe_open(str(self.path / file), framework="pt") as f:
            yield f.get_tensor

    def layout(self, file: str) -> dict[str, tuple[tuple[int, ...], str]]:
        """(shape, safetensors dtype name) of every tensor in one of its files."""
        from safetensors import safe_open

        with safe_open(str(self.path / file), framework="pt") as f:
            out = {}
            names = f.keys()
            for name in names:
                part = f.get_slice(name)
                out[name] = (tuple(part.get_shape()), part.get_dtype())
            return out


def root(out: Path) -> Path:
    return Path(out) / CHECKPOINTS


# === writing =================================================================


def write(out: Path, name: str, files: dict[str, dict[str, torch.Tensor]], state: dict,
          keep: int) -> tuple[Path, int]:
    """Write checkpoint ``name`` atomically; returns (its folder, its bytes).

    Raises CheckpointWriteError (one line) when it cannot be written; nothing
    of it is left behind then, and every checkpoint before it is kept.
    """
    folder = root(out)
    tmp = folder / f".{name}.tmp-{os.getpid()}"
    final = folder / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        listing = {}
        for file, tensors in files.items():
            digest, size = weights.write_file(tmp / file,
                                              [Entry.of(k, v) for k, v in tensors.items()],
                                              checksum=CHECKSUM)
            listing[file] = {CHECKSUM: digest, "bytes": size}
        old = _out_of_the_way(final)
        os.rename(tmp, final)
        body = {"format": FORMAT, "name": name, "files": listing, "state": state, "rng": _encode_rng(rng_state()), "time": time.time()}
        size = _write_manifest(final / MANIFEST, body)
        weights.fsync_dir(final)
        weights.fsync_dir(folder)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if final.exists() and not (final / MANIFEST).exists():
            shutil.rmtree(final, ignore_errors=True)  # renamed, but its manifest failed
        kept = [p.name for p in complete(out)]
        raise CheckpointWriteError(
            f"checkpoint {name} not written: {exc.strerror or exc} "
            f"({exc.filename or folder}); "
            + (f"{kept[-1]} kept" if kept else "no earlier checkpoint to keep")) from None
    prune(out, keep)
    return final, size + sum(f["bytes"] for f in listing.values())


def _out_of_the_way(final: Path) -> Path | None:
    """An earlier checkpoint of the same name (a run resumed from an older one writes it
    again) moves aside until the new one is in place."""
    if not final.exists():
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
    with open(path, "wb") as f:
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
    def tensor(name: str) -> torch.Tensor:
        return torch.frombuffer(bytearray(base64.b64decode(ckpt.manifest["rng"][name])),
                                dtype=torch.uint8)

    torch.set_rng_state(tensor("torch"))
    for name in ckpt.manifest["rng"]:
        if name.startswith("cuda.") and torch.cuda.is_available() \
                and int(name[5:]) < torch.cuda.device_count():
            torch.cuda.set_rng_state(tensor(name), int(name[5:]))


def order_of(state: dict) -> int:
    """Where a checkpoint lies in its run: optimizer steps done, every pass together."""
    return sum(p["steps_done"] for p in state["passes"].values())


# === finding and reading =====================================================


def complete(out: Path) -> list[Path]:
    """Checkpoint folders with a readable manifest, oldest first (not yet verified)."""
    found = []
    folder = root(out)
    if not folder.is_dir():
        return []
    for path in folder.iterdir():
        if not path.name.startswith(PREFIX) or not path.is_dir():
            continue
        try:
            manifest = json.loads((path / MANIFEST).read_text())
            found.append((order_of(manifest["state"]), float(manifest.get("time") or 0), path))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # incomplete: it was being written when the trainer stopped
    return [p for _, _, p in sorted(found)]


def verify(path: Path) -> Checkpoint:
    """The checkpoint at ``path``, its files checked against the manifest; else one line."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no checkpoint folder there")
    manifest_path = path / MANIFEST
    if not manifest_path.exists():
        raise CheckpointError(f"{path}: incomplete, no {MANIFEST} (the trainer stopped while "
                              f"writing it)")
    try:
        manifest = json.loads(manifest_path.read_text())
        files, digest = manifest["files"], manifest.pop(CHECKSUM)
        if manifest.get("format") != FORMAT:
            raise CheckpointError(f"{manifest_path}: format {manifest.get('format')!r}, this "
                                  f"trainer reads {FORMAT}")
        state = manifest["state"]
        state["passes"], state["step"], state["fingerprint"], manifest["rng"]["torch"]
    except (OSError, ValueError, KeyError, TypeError):
        raise CheckpointError(f"{manifest_path}: not a checkpoint manifest") from None
    if _body_digest(manifest) != digest:
        raise CheckpointError(f"{manifest_path}: fails its checksum ({CHECKSUM} of its body "
                              f"differs from the one it records)")
    for name, info in files.items():
        file = path / name
        try:
            size = file.stat().st_size
        except OSError:
            raise CheckpointError(f"{file}: missing") from None
        if size != info["bytes"]:
            raise CheckpointError(f"{file}: truncated ({size} of {info['bytes']} bytes)"
                                  if size < info["bytes"] else
                                  f"{file}: {size} bytes, the manifest says {info['bytes']}")
        if weights.file_digest(file, CHECKSUM) != info.get(CHECKSUM):
            raise CheckpointError(f"{file}: fails its checksum ({CHECKSUM} differs from "
                                  f"{MANIFEST}'s)")
    return Checkpoint(path, manifest)


def newest(out: Path, on_bad: Callable[[Path, str], None]) -> Checkpoint | None:
    """The newest checkpoint that verifies; ``on_bad`` hears of each newer one passed over.

    None when there is no complete checkpoint; CheckpointError (the newest's
    reason) when there are some and none verifies.
    """
    first_error = None
    for path in reversed(complete(out)):
        try:
            return verify(path)
        except CheckpointError as exc:
            first_error = first_error or exc
            on_bad(path, str(exc))
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


def prune(out: Path, keep: int) -> None:
    """Keep the newest ``keep`` complete checkpoints; remove older ones and leftovers."""
    done = complete(out)
    for path in done[:-keep] if keep > 0 else done:
        shutil.rmtree(path, ignore_errors=True)
    for path in root(out).iterdir():
        if path.name.startswith(".") and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)  # a temporary folder of a stopped writer
        elif path.name.startswith(PREFIX) and path not in done and done:
            shutil.rmtree(path, ignore_errors=True)  # incomplete, and a newer one is complete
