"""Checkpoints belong to their run: the manifest names the run and the home, --resume auto
takes only this run's own, another user's or a loose one is refused in one line, and
pruning removes only what this run wrote."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest
import torch
from test_trainer_checkpoint_crafted import agree
from test_trainer_checkpoints import events, steps, train

from tests.conftest import NOBODY, as_nobody, needs_nobody
from trainer import records
from trainer.config import TrainConfig
from trainer.errors import UsageError
from trainer.output import checkpoint, weights
from trainer.output.checkpoint import MANIFEST, CheckpointError, ForeignCheckpoint
from trainer.output.weights import Entry
from trainer.ownership import Owner


def test_the_manifest_names_the_run_and_the_home_and_only_its_owner_may_read_it(tmp_path):
    old = os.umask(0o002)  # a umask that would leave files group-writable
    try:
        train(tmp_path, run_id="r1", home_id="h1", checkpoint_every=6)
    finally:
        os.umask(old)
    folder = checkpoint.root(tmp_path) / "step-6"
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["owner"] == {"run_id": "r1", "home_id": "h1"}
    assert checkpoint.verify(folder).owner == Owner("r1", "h1")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {0o600}


# === --resume auto takes only this run's own =========================================


def plant(src, out, name: str) -> None:
    """A copy of checkpoint ``name`` of the run in ``src`` in ``out``'s checkpoints/."""
    shutil.copytree(checkpoint.root(src) / name, checkpoint.root(out) / name)


@pytest.mark.parametrize("theirs, ours, words", [
    ({"run_id": "7"}, {"run_id": "8"},
     ("a checkpoint of a trainer started by hand (run 7), not of this run (a trainer "
      "started by hand (run 8))")),
    ({"run_id": "3", "home_id": "aaaa"}, {"run_id": "3", "home_id": "bbbb"},
     ("a checkpoint of run 3 of rngdctl home aaaa, not of this run (run 3 of rngdctl "
      "home bbbb)")),
], ids=["another run", "another home"])
def test_auto_passes_over_another_runs_checkpoint_and_never_writes_over_it(
        tmp_path, theirs, ours, words):
    train(tmp_path / "a", **theirs, checkpoint_every=6)
    out = tmp_path / "b"
    train(out, **ours, checkpoint_every=3)
    shutil.rmtree(checkpoint.root(out) / "step-6")  # stopped after step 3, say
    plant(tmp_path / "a", out, "step-6")
    planted = (checkpoint.root(out) / "step-6" / MANIFEST).read_bytes()
    recs = train(out, **ours, checkpoint_every=3)
    (bad,) = events(recs, records.CHECKPOINT_BAD)
    assert bad.data["error"] == f"{checkpoint.root(out) / 'step-6'}: {words}"
    assert events(recs, records.RESUME)[0].data["step"] == 3 and steps(recs) == [4, 5, 6]
    (failed,) = events(recs, records.CHECKPOINT_FAILED)  # its step-6 cannot take that name
    assert f"step-6 not written: {checkpoint.root(out) / 'step-6'}: {words}" in failed.message
    assert (checkpoint.root(out) / "step-6" / MANIFEST).read_bytes() == planted


def test_auto_with_none_of_this_runs_own_starts_afresh(tmp_path):
    train(tmp_path / "a", run_id="7", checkpoint_every=6)
    out = tmp_path / "b"
    train(out, run_id="8", steps=6)
    plant(tmp_path / "a", out, "step-6")
    recs = train(out, run_id="8")
    assert steps(recs) == [1, 2, 3, 4, 5, 6] and not events(recs, records.RESUME)


# === --resume PATH of another run's needs --resume-foreign ============================


def test_resume_path_of_another_runs_checkpoint_needs_resume_foreign(tmp_path):
    train(tmp_path / "a", run_id="3", home_id="aaaa", checkpoint_every=3)
    path = checkpoint.root(tmp_path / "a") / "step-3"
    with pytest.raises(ForeignCheckpoint) as err:
        train(tmp_path / "b", run_id="9", home_id="bbbb", resume=str(path))
    assert str(err.value) == (f"{path}: a checkpoint of run 3 of rngdctl home aaaa, not of "
                              f"this run (run 9 of rngdctl home bbbb): --resume-foreign to "
                              f"go on from it")
    recs = train(tmp_path / "b", run_id="9", home_id="bbbb", resume=str(path),
                 resume_foreign=True)
    assert events(recs, records.RESUME)[0].data["step"] == 3 and steps(recs) == [4, 5, 6]


def test_resume_foreign_without_a_path_is_refused():
    with pytest.raises(UsageError, match="--resume-foreign needs --resume PATH"):
        TrainConfig(out="x", resume_foreign=True).validate()


def test_the_cli_passes_the_home_id_and_resume_foreign(trainer_cli, tmp_path):
    train(tmp_path / "a", run_id="3", home_id="aaaa", checkpoint_every=3)
    path = checkpoint.root(tmp_path / "a") / "step-6"

    def run(out: str, *args: str):
        return trainer_cli("train", "--model", "tiny-llama", "--steps", "6", "--seq-len", "16",
                           "--accum", "1", "--threads", "1", "--out", str(tmp_path / out),
                           "--run-id", "3", "--resume", str(path), *args)

    refused = run("b", "--home-id", "bbbb")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (
        f"trainer: error: {path}: a checkpoint of run 3 of rngdctl home aaaa, not of this run "
        f"(run 3 of rngdctl home bbbb): --resume-foreign to go on from it")
    assert run("c", "--home-id", "aaaa").returncode == 0
    assert run("d", "--home-id", "bbbb", "--resume-foreign").returncode == 0


# === another user's, or a loose one ==================================================


@pytest.mark.parametrize("loosen", [
    lambda folder: (folder / "main.safetensors").chmod(0o660),
    lambda folder: (folder / MANIFEST).chmod(0o606),
    lambda folder: folder.chmod(0o770),
], ids=["group-writable weights", "world-writable manifest", "group-writable folder"])
def test_a_checkpoint_others_may_write_is_refused_in_one_line_and_passed_over(tmp_path, loosen):
    train(tmp_path, checkpoint_every=3, keep_checkpoints=3)
    folder = checkpoint.root(tmp_path) / "step-6"
    loosen(folder)
    with pytest.raises(CheckpointError, match=r"may be written by (its group|others) \(mode "):
        checkpoint.verify(folder)
    recs = train(tmp_path, checkpoint_every=3, keep_checkpoints=3)
    assert "chmod go-w" in events(recs, records.CHECKPOINT_BAD)[0].data["error"]
    assert events(recs, records.RESUME)[0].data["step"] == 3 and steps(recs) == [4, 5, 6]


def zeroed(folder) -> None:
    """The checkpoint's weights and moments replaced by zeros, and its manifest made to agree:
    what another user plants to decide a run's result."""
    from safetensors import safe_open

    file = folder / "main.safetensors"
    with safe_open(str(file), "pt") as f:
        names = f.keys()
        tensors = {name: torch.zeros_like(f.get_tensor(name)) for name in names}
    file.unlink()
    weights.write_file(file, [Entry.of(k, v) for k, v in tensors.items()])
    agree(folder)


def readable_by_all(path) -> None:
    for folder, _, files in os.walk(path):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)


def give_to_nobody(path) -> None:
    for folder, _, files in os.walk(path):
        os.chown(folder, NOBODY, NOBODY)
        for name in files:
            os.chown(os.path.join(folder, name), NOBODY, NOBODY)


@needs_nobody
def test_a_checkpoint_planted_by_another_user_decides_nothing(tmp_path, shared_tmp):
    # The victim's run stopped after step 3, in a folder whose checkpoints/ others may write.
    out = shared_tmp / "out"
    train(out, checkpoint_every=3)
    shutil.rmtree(checkpoint.root(out) / "step-6")
    out.chmod(0o755)
    checkpoint.root(out).chmod(0o1777)
    # Another user plants a newer checkpoint of the same (guessable) config, zeroed.
    train(tmp_path / "made", checkpoint_every=6)
    planted = shared_tmp / "planted"
    shutil.copytree(checkpoint.root(tmp_path / "made") / "step-6", planted)
    zeroed(planted)
    readable_by_all(planted)
    as_nobody("cp", "-r", str(planted), str(checkpoint.root(out) / "step-6"))
    assert (checkpoint.root(out) / "step-6").stat().st_uid == NOBODY

    recs = train(out, checkpoint_every=3)
    assert events(recs, records.RESUME)[0].data["step"] == 3 and steps(recs) == [4, 5, 6]
    assert "belongs to nobody (uid 65534), not to you" in \
        events(recs, records.CHECKPOINT_BAD)[0].data["error"]
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert f.get_tensor("model.norm.weight").abs().sum() > 0


@needs_nobody
def test_resume_path_of_another_users_checkpoint_is_refused_naming_them(tmp_path, shared_tmp):
    train(tmp_path / "made", checkpoint_every=6)
    theirs = shared_tmp / "theirs"
    shutil.copytree(checkpoint.root(tmp_path / "made") / "step-6", theirs)
    give_to_nobody(theirs)
    with pytest.raises(ForeignCheckpoint, match=r"checkpoint .*theirs belongs to nobody "
                                                r"\(uid 65534\), not to you"):
        train(tmp_path / "out", resume=str(theirs), resume_foreign=True)


# === prune removes only what this run wrote ==========================================


def test_prune_removes_only_this_runs_older_checkpoints_and_its_temporary_folders(tmp_path):
    train(tmp_path / "a", run_id="7", checkpoint_every=3)
    out = tmp_path / "b"
    train(out, run_id="8", checkpoint_every=2, keep_checkpoints=3)
    ckpts = checkpoint.root(out)
    plant(tmp_path / "a", out, "step-3")  # another run's
    (ckpts / ".mine").mkdir()  # a user's hidden folder
    (ckpts / ".mine" / "notes.txt").write_text("mine")
    (ckpts / "step-notes").mkdir()  # a step-* folder without a manifest
    (ckpts / "step-notes" / "plan.txt").write_text("mine")
    (ckpts / ".step-2.tmp-1").mkdir()  # temporary folders of a stopped writer
    (ckpts / ".step-4.old-2").mkdir()
    checkpoint.prune(out, 1, Owner("8", None))
    assert sorted(p.name for p in ckpts.iterdir()) == [".mine", "step-3", "step-6",
                                                       "step-notes"]
    assert (ckpts / ".mine" / "notes.txt").read_text() == "mine"
    assert (ckpts / "step-notes" / "plan.txt").read_text() == "mine"


@needs_nobody
def test_a_checkpoint_naming_this_run_is_not_pruned_when_another_user_owns_it(tmp_path):
    train(tmp_path, run_id="7", checkpoint_every=2, keep_checkpoints=3)
    give_to_nobody(checkpoint.root(tmp_path) / "step-2")
    checkpoint.prune(tmp_path, 1, Owner("7", None))
    assert sorted(p.name for p in checkpoint.root(tmp_path).iterdir()) == ["step-2", "step-6"]
