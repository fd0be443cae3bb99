"""Checkpoints on disk: written whole or not at all, pruned, checked before any load."""

from __future__ import annotations

import io
import json

import pytest

from trainer import records
from trainer.config import TrainConfig
from trainer.output import checkpoint
from trainer.output.checkpoint import CheckpointError
from trainer.output.weights import INJECT_ENOSPC_ENV
from trainer.records import Event, RecordWriter, Step
from trainer.train import Recipe

SMALL = {"model": "tiny-llama", "backend": "cpu", "steps": 6, "seq_len": 16, "accum": 1,
         "lr": 1e-3, "threads": 1}


def train(out, **cfg) -> list:
    sink = io.StringIO()
    recipe = Recipe(TrainConfig(**{**SMALL, "out": str(out), **cfg}), RecordWriter(sink))
    recipe.setup()
    recipe.run()
    return [records.parse_line(line) for line in sink.getvalue().splitlines()]


def events(recs, name: str) -> list[Event]:
    return [r for r in recs if isinstance(r, Event) and r.event == name]


def steps(recs) -> list[int]:
    return [r.step for r in recs if isinstance(r, Step)]


def test_only_the_newest_k_complete_checkpoints_are_kept(tmp_path):
    train(tmp_path, checkpoint_every=1, keep_checkpoints=2)
    assert [p.name for p in checkpoint.complete(tmp_path)] == ["step-5", "step-6"]
    assert sorted(p.name for p in checkpoint.root(tmp_path).iterdir()) == ["step-5", "step-6"]


def test_a_checkpoint_without_its_manifest_is_passed_by_and_the_one_before_is_used(tmp_path):
    train(tmp_path, checkpoint_every=2, keep_checkpoints=3)
    (checkpoint.root(tmp_path) / "step-6" / checkpoint.MANIFEST).unlink()  # died writing it
    recs = train(tmp_path, checkpoint_every=2, keep_checkpoints=3)
    (resume,) = events(recs, records.RESUME)
    assert resume.data["step"] == 4 and steps(recs) == [5, 6]


def test_a_corrupt_newest_checkpoint_is_reported_and_an_older_one_resumed(tmp_path):
    train(tmp_path, checkpoint_every=2, keep_checkpoints=3)
    main = checkpoint.root(tmp_path) / "step-6" / "main.safetensors"
    data = bytearray(main.read_bytes())
    data[-1] ^= 0xFF
    main.write_bytes(bytes(data))
    recs = train(tmp_path, checkpoint_every=2, keep_checkpoints=3)
    (bad,) = events(recs, records.CHECKPOINT_BAD)
    assert "main.safetensors: fails its checksum" in bad.data["error"]
    assert events(recs, records.RESUME)[0].data["step"] == 4


@pytest.mark.parametrize("damage, words", [
    (lambda f: f.write_bytes(f.read_bytes()[:-100]), "truncated"),
    (lambda f: f.write_bytes(f.read_bytes()[:50] + b"x" + f.read_bytes()[51:]),
     "fails its checksum"),
    (lambda f: f.unlink(), "missing"),
])
def test_a_damaged_checkpoint_is_refused_in_one_line_naming_the_file(tmp_path, damage, words):
    train(tmp_path, checkpoint_every=3)
    path = checkpoint.root(tmp_path) / "step-6"
    damage(path / "main.safetensors")
    with pytest.raises(CheckpointError) as err:
        checkpoint.verify(path)
    assert str(path / "main.safetensors") in str(err.value) and words in str(err.value)
    assert "\n" not in str(err.value)


def test_a_checkpoint_of_another_config_is_refused_naming_what_differs(tmp_path):
    # One run of a home (its folder's owner), edited between its stops.
    train(tmp_path, checkpoint_every=3, run_id="4", home_id="h")
    with pytest.raises(CheckpointError, match=r"another config \(lr: 0.001 there, 0.002 here"):
        train(tmp_path, lr=2e-3, run_id="4", home_id="h")


def test_a_checkpoint_of_another_model_shape_is_refused_before_any_load(tmp_path):
    train(tmp_path, checkpoint_every=3)
    ckpt = checkpoint.verify(checkpoint.root(tmp_path) / "step-6")
    layout = {name: (shape, {"F32": __import__("torch").float32}[dtype])
              for name, (shape, dtype) in ckpt.layout("main.safetensors").items()}
    name = next(iter(layout))
    layout[name] = ((3, 3), layout[name][1])
    with pytest.raises(CheckpointError, match=f"{name} is .* this model's is \\[3, 3\\]"):
        checkpoint.check_layout(ckpt, "main.safetensors", layout)


def test_a_full_disk_keeps_the_previous_checkpoint_and_the_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv(INJECT_ENOSPC_ENV, "main.safetensors:2")  # the 2nd checkpoint's file
    recs = train(tmp_path, checkpoint_every=2, keep_checkpoints=3)
    (failed,) = events(recs, records.CHECKPOINT_FAILED)
    assert "step-4 not written: No space left on device" in failed.message
    assert "step-2 kept" in failed.message and failed.data["action"] == "continue"
    assert steps(recs) == [1, 2, 3, 4, 5, 6]
    assert [p.name for p in checkpoint.complete(tmp_path)] == ["step-2", "step-6"]
    assert [p.name for p in checkpoint.root(tmp_path).iterdir() if p.name.startswith(".")] == []


def test_a_full_disk_stops_the_run_when_asked_with_one_line(tmp_path, monkeypatch):
    from trainer.errors import TrainerError

    monkeypatch.setenv(INJECT_ENOSPC_ENV, "main.safetensors:2")
    with pytest.raises(TrainerError, match="step-4 not written: No space left on device"):
        train(tmp_path, checkpoint_every=2, on_checkpoint_error="stop")
    assert [p.name for p in checkpoint.complete(tmp_path)] == ["step-2"]


def test_the_manifest_lists_every_file_with_its_checksum(tmp_path):
    train(tmp_path, checkpoint_every=6)
    folder = checkpoint.root(tmp_path) / "step-6"
    manifest = json.loads((folder / checkpoint.MANIFEST).read_text())
    assert sorted(manifest["files"]) == ["main.safetensors"]
    assert sorted(p.name for p in folder.iterdir()) == ["main.safetensors", checkpoint.MANIFEST]
    assert checkpoint.verify(folder).position == {"main": 6}


def test_a_manifest_whose_state_was_changed_fails_its_own_checksum(tmp_path):
    train(tmp_path, checkpoint_every=6)
    path = checkpoint.root(tmp_path) / "step-6" / checkpoint.MANIFEST
    manifest = json.loads(path.read_text())
    manifest["state"]["passes"]["main"]["steps_done"] = 5
    path.write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError) as err:
        checkpoint.verify(path.parent)
    assert str(err.value) == (f"{path}: fails its checksum (xxh3_64 of its body differs from "
                              f"the one it records)")


def test_a_torn_manifest_leaves_the_checkpoint_incomplete_and_the_one_before_is_used(
        tmp_path):
    train(tmp_path, checkpoint_every=3, keep_checkpoints=2)
    path = checkpoint.root(tmp_path) / "step-6" / checkpoint.MANIFEST
    path.write_bytes(path.read_bytes()[:200])  # a crash while the manifest was written
    assert [p.name for p in checkpoint.complete(tmp_path)] == ["step-3"]
    recs = train(tmp_path, checkpoint_every=3, keep_checkpoints=2)
    assert events(recs, records.RESUME)[0].data["step"] == 3 and steps(recs) == [4, 5, 6]


def test_a_full_disk_at_the_model_save_ends_the_run_with_one_line_naming_what_is_kept(
        trainer_cli, tmp_path):
    out = tmp_path / "out"
    proc = trainer_cli("train", "--model", "tiny-llama", "--steps", "4", "--seq-len", "16",
                       "--accum", "1", "--out", str(out), "--checkpoint-every", "4",
                       env={INJECT_ENOSPC_ENV: "model.safetensors:1"})
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"trainer: the model was not saved to {out}: No space left on "
                           f"device ({out}/.save-")
    assert last.endswith(f"/model.safetensors); {out / 'checkpoints' / 'step-4'} is kept: "
                         "free space and resume from it")
    assert "Traceback" not in proc.stderr and not list(out.glob(".save-*"))
    end = records.parse_line(proc.stdout.splitlines()[-1])
    assert end.status == "error" and "step-4 is kept" in end.error


def test_a_bad_checkpoint_given_to_resume_is_one_line_and_exit_2(trainer_cli, tmp_path):
    train(tmp_path, checkpoint_every=3)
    folder = checkpoint.root(tmp_path) / "step-6"
    size = (folder / "main.safetensors").stat().st_size
    (folder / "main.safetensors").write_bytes(b"short")
    proc = trainer_cli("train", "--model", "tiny-llama", "--steps", "6", "--seq-len", "16",
                       "--accum", "1", "--out", str(tmp_path), "--resume", str(folder))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"trainer: error: {folder / 'main.safetensors'}: truncated (5 of {size} bytes)")
