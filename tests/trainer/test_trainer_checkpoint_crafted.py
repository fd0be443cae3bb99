"""Crafted or corrupt checkpoints: each is one line naming the file, never a traceback, a
hang or a memory blow-up, and ``--resume auto`` passes over it to the next older one.

Each case damages the newest of two checkpoints (step-6; step-3 before it) and then,
where a checksum would catch it, makes the manifest agree with the damage (sizes,
checksums, the manifest's own checksum), as someone who meant it would: what is left
to catch it is the reading itself.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import shutil
import struct
from pathlib import Path

import pytest
import xxhash
from test_trainer_checkpoints import events, steps, train

from trainer import models, records
from trainer.output import checkpoint, weights
from trainer.output.checkpoint import MANIFEST, CheckpointError
from trainer.ownership import NotOurs

REPO = Path(__file__).resolve().parents[2]
TWO = {"checkpoint_every": 3, "keep_checkpoints": 3}


def newest(out: Path) -> Path:
    return checkpoint.root(out) / "step-6"


def agree(folder: Path, edit=lambda manifest: None) -> None:
    """Make the manifest's file sizes and checksums, and then its own checksum, those of
    what is there now, ``edit``ing it in between."""
    path = folder / MANIFEST
    manifest = json.loads(path.read_text())
    manifest.pop(checkpoint.CHECKSUM)
    for name, info in manifest["files"].items():
        file = folder / name
        if file.is_file():  # a link: what it points to
            info["bytes"] = file.stat().st_size
            info[checkpoint.CHECKSUM] = xxhash.xxh3_64(file.read_bytes()).hexdigest()
    edit(manifest)
    body = xxhash.xxh3_64(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
    path.write_text(json.dumps({**manifest, checkpoint.CHECKSUM: body}))


# === safetensors files that safetensors itself refuses, or that hold other tensors =====


def split(file: Path) -> tuple[dict, bytes]:
    data = file.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def join(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def huge_header(file: Path) -> None:
    file.write_bytes(struct.pack("<Q", 1 << 62) + file.read_bytes()[8:])


def offsets_out_of_range(file: Path) -> None:
    header, body = split(file)
    name = next(k for k in header if k != "__metadata__")
    header[name]["data_offsets"][1] = len(body) * 4
    file.write_bytes(join(header, body))


def truncated(file: Path) -> None:
    file.write_bytes(file.read_bytes()[:-1000])


def non_json_header(file: Path) -> None:
    _, body = split(file)
    file.write_bytes(struct.pack("<Q", 16) + b"{not json at all" + body)


def without_a_tensor(file: Path) -> None:
    header, body = split(file)
    name = next(k for k in header if k.endswith(".exp_avg"))
    start, end = header.pop(name)["data_offsets"]
    for info in header.values():
        if "data_offsets" in info and info["data_offsets"][0] >= end:
            info["data_offsets"] = [o - (end - start) for o in info["data_offsets"]]
    file.write_bytes(join(header, body[:start] + body[end:]))


def with_an_extra_tensor(file: Path) -> None:
    header, body = split(file)
    header["planted.weight"] = {"dtype": "F32", "shape": [2],
                                "data_offsets": [len(body), len(body) + 8]}
    file.write_bytes(join(header, body + b"\0" * 8))


def of_another_dtype(file: Path) -> None:
    header, body = split(file)
    header["norm.weight.master"]["dtype"] = "I32"  # the same bytes, read as another type
    file.write_bytes(join(header, body))


def linked_elsewhere(file: Path) -> None:
    other = file.parent.parent / "step-3" / MANIFEST  # another file, readable, not weights
    file.unlink()
    file.symlink_to(other)


@pytest.mark.parametrize("damage, words", [
    (huge_header, "header too large"),
    (offsets_out_of_range, "invalid shape, data type, or offset"),
    (truncated, "not fully covered"),
    (non_json_header, "invalid JSON in header"),
    (without_a_tensor, "has no "),
    (with_an_extra_tensor, "holds planted.weight, which this model has not"),
    (of_another_dtype, "norm.weight.master is [64] I32, this model's is [64] F32"),
    (linked_elsewhere, "a symbolic link, not a checkpoint file"),
], ids=lambda v: getattr(v, "__name__", "")[:24] if callable(v) else "")
def test_a_crafted_weights_file_is_one_line_and_the_older_checkpoint_is_resumed(
        tmp_path, damage, words):
    train(tmp_path, **TWO)
    file = newest(tmp_path) / "main.safetensors"
    damage(file)
    agree(newest(tmp_path))
    recs = train(tmp_path, **TWO)
    (bad,) = events(recs, records.CHECKPOINT_BAD)
    error = bad.data["error"]
    assert error.startswith(f"{file}: ") and words in error and "\n" not in error
    assert events(recs, records.RESUME)[0].data["step"] == 3 and steps(recs) == [4, 5, 6]


def test_a_crafted_weights_file_given_to_resume_is_one_line_and_exit_2(trainer_cli, tmp_path):
    train(tmp_path, **TWO)
    file = newest(tmp_path) / "main.safetensors"
    non_json_header(file)
    agree(newest(tmp_path))
    proc = trainer_cli("train", "--model", "tiny-llama", "--steps", "6", "--seq-len", "16",
                       "--accum", "1", "--threads", "1", "--out", str(tmp_path), "--resume",
                       str(newest(tmp_path)))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"trainer: error: {file}: not a safetensors file the trainer reads "
                           f"(Error while deserializing header: invalid JSON")


# === manifest values of the wrong type, or that disagree ===============================


def rng_of(nbytes: int):
    def edit(m):
        m["rng"]["torch"] = base64.b64encode(b"\1" * nbytes).decode()
    return edit


def pass_of(edit):
    return lambda m: edit(m["state"]["passes"]["main"])


@pytest.mark.parametrize("edit, words", [
    (lambda m: m["state"].update(step="6"), "state.step is a string, not an integer"),
    (rng_of(100), "rng.torch holds 100 bytes, torch's random state"),
    (lambda m: m["rng"].update(torch="not base64!"), "rng.torch is not base64"),
    (lambda m: m["state"].update(passes=[m["state"]["passes"]["main"]]),
     "state.passes is a list, not an object"),
    (lambda m: m.update(files=[]), "files is a list, not an object"),
    (lambda m: m["files"]["main.safetensors"].update(bytes="big"),
     "files.main.safetensors.bytes is a string, not an integer"),
    (lambda m: m.update(owner=None), "owner is null, not an object"),
    (lambda m: m.update(files={"../../main.safetensors": m["files"]["main.safetensors"]}),
     "'../../main.safetensors' is not the file of one of its passes"),
    (lambda m: m.update(files={}), "files lists no main.safetensors"),
    (pass_of(lambda p: p.update(losses=p["losses"][:4])), "4 losses for 6 steps done"),
    (pass_of(lambda p: p.update(losses=p["losses"] + [1.0, 1.0])), "8 losses for 6 steps done"),
    (pass_of(lambda p: p.update(steps_done=8, losses=p["losses"] + [1.0, 1.0])),
     "8 steps done of 6"),
    (pass_of(lambda p: p.update(steps_done=4, losses=p["losses"][:4])),
     "state.step is 6, the main pass's steps done 4"),
    (pass_of(lambda p: p.update(losses=["low"] * 6)), "losses[0] is a string, not a number"),
], ids=["string step", "short rng", "bad base64 rng", "list for passes", "list for files",
        "string size", "no owner", "a path out of the folder", "empty file list",
        "fewer losses", "more losses", "more steps than the pass has", "step disagrees",
        "string losses"])
def test_a_manifest_value_of_the_wrong_type_or_disagreeing_is_one_line_and_passed_over(
        tmp_path, edit, words):
    train(tmp_path, **TWO)
    agree(newest(tmp_path), edit)
    with pytest.raises(CheckpointError) as err:
        checkpoint.verify(newest(tmp_path))
    assert str(err.value).startswith(f"{newest(tmp_path) / MANIFEST}: ")
    assert words in str(err.value) and "\n" not in str(err.value)
    recs = train(tmp_path, **TWO)
    (bad,) = events(recs, records.CHECKPOINT_BAD)
    assert words in bad.data["error"]
    assert events(recs, records.RESUME)[0].data["step"] == 3 and steps(recs) == [4, 5, 6]


def test_a_manifest_past_its_size_cap_is_refused_unread(tmp_path):
    train(tmp_path, **TWO)
    path = newest(tmp_path) / MANIFEST
    with open(path, "ab") as f:
        f.truncate(checkpoint.MAX_MANIFEST_BYTES + 1)
    with pytest.raises(CheckpointError, match="bytes, more than a checkpoint manifest holds"):
        checkpoint.verify(newest(tmp_path))


# === files that are not files: a FIFO, a device ========================================


def limited_memory():
    """A trainer that tries to read /dev/zero into memory stops at 2 GB, not the host's (a
    tiny run needs a quarter of it)."""
    resource.setrlimit(resource.RLIMIT_DATA, (2 << 30, 2 << 30))


def fifo_listed_empty(file: Path) -> None:
    """A FIFO in place of the weights, which the manifest lists as the empty file it
    stats as: a reader that opens it waits for a writer forever."""
    file.unlink()
    os.mkfifo(file)
    empty = xxhash.xxh3_64(b"").hexdigest()
    agree(file.parent, lambda m: m["files"]["main.safetensors"].update(
        {"bytes": 0, checkpoint.CHECKSUM: empty}))


@pytest.mark.parametrize("plant, words", [
    (fifo_listed_empty, "main.safetensors: not a regular file (a FIFO)"),
    (lambda f: (f.parent.joinpath(MANIFEST).unlink(), os.mkfifo(f.parent / MANIFEST)),
     "manifest.json: not a regular file (a FIFO)"),
    (lambda f: (f.parent.joinpath(MANIFEST).unlink(),
                f.parent.joinpath(MANIFEST).symlink_to("/dev/zero")),
     "manifest.json: a symbolic link, not a checkpoint manifest"),
], ids=["weights FIFO", "manifest FIFO", "manifest linked to /dev/zero"])
def test_a_fifo_or_a_device_is_passed_over_at_once(tmp_path, plant, words):
    import subprocess
    import sys

    train(tmp_path, **TWO)
    plant(newest(tmp_path) / "main.safetensors")
    args = [sys.executable, "-m", "trainer", "train", "--model", "tiny-llama", "--steps", "6",
            "--seq-len", "16", "--accum", "1", "--threads", "1", "--out", str(tmp_path),
            "--checkpoint-every", "3", "--keep-checkpoints", "3"]
    # A reader that blocks on the FIFO would wait forever: the timeout fails it instead.
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          check=False,
                          preexec_fn=limited_memory,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
                               "RNGDCTL_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = [records.parse_line(line) for line in proc.stdout.splitlines()]
    (bad,) = events(recs, records.CHECKPOINT_BAD)
    assert words in bad.data["error"] and "\n" not in bad.data["error"]
    assert events(recs, records.RESUME)[0].data["step"] == 3 and steps(recs) == [4, 5, 6]


def test_the_digest_of_a_fifo_or_a_link_is_refused_without_reading_it(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "real").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(NotOurs, match="a FIFO"):
        weights.file_digest(tmp_path / "fifo")
    with pytest.raises(NotOurs, match="symbolic link"):
        weights.file_digest(tmp_path / "link")
    assert weights.file_digest(tmp_path / "link", follow_symlinks=True) == \
        weights.file_digest(tmp_path / "real")


def test_a_file_swapped_after_it_was_verified_is_never_opened(tmp_path):
    train(tmp_path, **TWO)
    ckpt = checkpoint.verify(newest(tmp_path))
    file = newest(tmp_path) / "main.safetensors"
    file.unlink()
    file.symlink_to(checkpoint.root(tmp_path) / "step-3" / "main.safetensors")
    with pytest.raises(CheckpointError, match="main.safetensors: replaced since it was verified"):
        ckpt.layout("main.safetensors")


# === the layout a checkpoint is checked against before any engine exists ================


@pytest.mark.parametrize("name, lora, backends, resident", [
    ("tiny-llama", 0, "cpu", 0), ("tiny-llama", 0, "cpu,cpu", 1), ("tiny-qwen2", 0, "cpu", 2),
    ("tiny-llama", 4, "cpu,cpu", 1), ("tiny-qwen2", 4, "cpu", 0),
])
def test_the_skeletons_layout_is_the_engines(name, lora, backends, resident):
    from trainer.backends import kinds as backend_specs
    from trainer.engine.layer_engine import LayerEngine, state_layout_of

    spec = models.resolve(name)
    model = models.build(spec, 128, seed=0)
    if lora:
        models.add_lora(model, lora)
    engine = LayerEngine(model, backend_specs.parse(backends), resident, 1e-3, 0.01, 1.0)
    skeleton = models.skeleton(spec, 128, lora)
    assert state_layout_of(skeleton, moments=True) == engine.state_layout(moments=True)
    assert next(skeleton.parameters()).device.type == "meta"


def test_passes_that_are_not_a_point_of_the_interleaved_order_are_passed_over(tmp_path):
    run = {**TWO, "baseline": True, "baseline_steps": 6, "interleave": 2, "settle": 0}
    train(tmp_path, **run)

    def baseline_behind(m):  # main 6 and baseline 5: no point of A A B B B B A A A A B B
        baseline = m["state"]["passes"]["baseline"]
        baseline["steps_done"], baseline["losses"] = 5, baseline["losses"][:5]
        m["files"]["baseline.safetensors"] = m["files"]["main.safetensors"]
    shutil.copy(newest(tmp_path) / "main.safetensors", newest(tmp_path) / "baseline.safetensors")
    agree(newest(tmp_path), baseline_behind)
    recs = train(tmp_path, **run)
    (bad,) = events(recs, records.CHECKPOINT_BAD)
    assert bad.data["error"] == (f"{newest(tmp_path) / MANIFEST}: its passes' steps are not a "
                                 f"point of the interleaved order (another --interleave)")
    assert events(recs, records.RESUME)[0].data["step"] == 3
