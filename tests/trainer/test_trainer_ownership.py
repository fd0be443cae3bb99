"""The trainer's --out is its run's alone (issues 33 and 36): claimed before any step,
refused in one line when it is another run's or a user's, and a save that touches only
the names this run wrote; its files are the user's alone unless --output-mode shares them."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import as_nobody, needs_nobody
from trainer import ownership, records
from trainer.config import TrainConfig
from trainer.errors import TrainerError, UsageError
from trainer.output import save
from trainer.records import RecordWriter, Step
from trainer.train import Recipe

REPO = Path(__file__).resolve().parents[2]
SMALL = {"model": "tiny-llama", "backend": "cpu", "steps": 2, "seq_len": 16, "accum": 1,
         "lr": 1e-3, "threads": 1}
CLI = ["--model", "tiny-llama", "--seq-len", "16", "--accum", "1"]


def recipe(out, **cfg) -> Recipe:
    return Recipe(TrainConfig(**{**SMALL, "out": str(out), **cfg}), RecordWriter(io.StringIO()))


def train(out, **cfg) -> Recipe:
    r = recipe(out, **cfg)
    r.setup()
    r.run()
    return r


def trainer(*args: str, umask: int = 0o022, cwd=None) -> subprocess.CompletedProcess:
    """``python -m trainer train ARGS`` under ``umask``, as a shell would start it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "trainer", "train", *args], env=env,
                          capture_output=True, text=True, timeout=600, check=False, cwd=cwd,
                          preexec_fn=lambda: os.umask(umask))


def step_records(stdout: str) -> list:
    return [r for r in map(records.parse_line, stdout.splitlines()) if isinstance(r, Step)]


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


# === another run's folder ====================================================


def test_a_second_trainer_with_other_options_never_writes_into_the_first_ones(tmp_path):
    out = tmp_path / "out"
    assert trainer(*CLI, "--steps", "2", "--out", str(out)).returncode == 0
    before = contents(out)
    proc = trainer(*CLI, "--steps", "3", "--out", str(out))
    assert proc.returncode == 2 and not step_records(proc.stdout)
    assert proc.stderr.strip().splitlines()[-1] == (
        f"trainer: error: --out {out} holds the output of a trainer started by hand with "
        f"another config (steps: 2 there, 3 here): run with the same options to go on, or "
        f"give another --out")
    assert contents(out) == before


def test_the_same_options_again_go_on_in_the_same_folder(tmp_path):
    train(tmp_path / "out", checkpoint_every=1, steps=3)
    again = recipe(tmp_path / "out", checkpoint_every=1, steps=3)
    again.setup()
    assert again.outdir.find_resume([("main", 0, 3)]).step == 3


def test_a_run_of_a_home_refuses_another_runs_folder_and_a_folder_inside_it(tmp_path):
    out = tmp_path / "out"
    train(out, run_id="1", home_id="home-a")
    for where in (out, out / "base"):
        with pytest.raises(UsageError, match="of run 1 of rngdctl home home-a"):
            recipe(where, run_id="2", home_id="home-a").setup()
    with pytest.raises(UsageError, match="run 1 of rngdctl home home-a"):
        recipe(out, run_id="1", home_id="home-b").setup()  # run 1 of another home
    recipe(out, run_id="1", home_id="home-a").setup()  # its own: a resume


def test_a_users_folder_with_files_is_refused_and_kept_byte_for_byte(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_bytes(b'{"mine": true}\n')
    proc = trainer(*CLI, "--steps", "2", "--out", str(mine))
    assert proc.returncode == 2 and not step_records(proc.stdout)
    assert proc.stderr.strip().splitlines()[-1] == (
        f"trainer: error: --out {mine} is not empty and no rngdctl run claims it (config.json "
        f"is there): give an empty or new folder")
    assert contents(mine) == {"config.json": b'{"mine": true}\n'}


@pytest.mark.parametrize("where", ["", "~", "{file}/out"])
def test_an_unusable_out_is_refused_before_step_one(tmp_path, where):
    (tmp_path / "a-file").write_text("x")
    proc = trainer(*CLI, "--steps", "2", "--out", where.format(file=tmp_path / "a-file"),
                   cwd=tmp_path)
    assert proc.returncode == 2 and not step_records(proc.stdout)
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("trainer: error: --out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # nothing written


@pytest.mark.parametrize("where", ["/", "/etc", "/usr"])
def test_a_system_folder_is_never_an_out(where):
    # In this process and without a step: a trainer that took it would write there as root.
    with pytest.raises(UsageError, match=f"--out '{where}': {where} is a system folder"):
        recipe(where).setup()


def test_a_trainer_stopped_by_bad_options_leaves_its_folder_to_the_corrected_run(tmp_path):
    with pytest.raises(UsageError):  # placement: refused after the claim
        recipe(tmp_path / "out", resident_layers=9).setup()
    train(tmp_path / "out")  # nothing was written there but the claim


@needs_nobody
def test_a_folder_another_user_made_for_the_run_is_refused(shared_tmp):
    as_nobody("mkdir", "-m", "755", str(shared_tmp / "planted"))
    proc = trainer(*CLI, "--steps", "2", "--out", str(shared_tmp / "planted"))
    assert proc.returncode == 2 and "belongs to nobody (uid 65534)" in proc.stderr


# === the claim and the save ==================================================


def test_the_claim_names_the_run_before_any_step_and_the_save_rewrites_it(tmp_path):
    out = tmp_path / "out"
    r = recipe(out, run_id="4", home_id="h")
    r.setup()
    claim = json.loads((out / ownership.CLAIM_NAME).read_text())
    assert claim["owner"] == {"run_id": "4", "home_id": "h", "config": None}
    assert claim["files"] == {}
    r.run()
    info = json.loads((out / ownership.CLAIM_NAME).read_text())
    assert info["owner"] == claim["owner"] and list(info["files"]) == ["model.safetensors"]
    assert {"config.json", "generation_config.json", "model.safetensors"} <= set(
        info["written"])


def test_the_save_neither_replaces_nor_removes_a_file_it_did_not_write(tmp_path):
    out = tmp_path / "out"
    r = recipe(out)
    r.setup()  # claimed; then the user puts files there
    (out / "model-00001-of-00002.safetensors").write_bytes(b"the user's")
    (out / "config.json").write_bytes(b"the user's config")
    with pytest.raises(TrainerError, match=f"{out / 'config.json'} is there and this run did "
                                           "not write it: move it away"):
        r.run()
    assert (out / "config.json").read_bytes() == b"the user's config"
    assert (out / "model-00001-of-00002.safetensors").read_bytes() == b"the user's"
    (out / "config.json").unlink()
    r2 = recipe(out)
    r2.setup()
    r2.run()  # the names this run did not write stay
    assert (out / "model-00001-of-00002.safetensors").read_bytes() == b"the user's"


def test_a_later_save_removes_only_the_names_its_own_save_wrote(tmp_path):
    out = tmp_path / "out"
    r = train(out, run_id="1", home_id="h")
    save.save(out, r.model, info={}, owner=r.outdir.owner, max_shard_bytes=200_000)
    sharded = json.loads((out / ownership.CLAIM_NAME).read_text())["written"]
    assert "model.safetensors" not in sharded and not (out / "model.safetensors").exists()
    save.save(out, r.model, info={}, owner=r.outdir.owner)  # one file again
    assert not [n for n in sharded if n.startswith("model-") and (out / n).exists()]


def test_a_base_folder_the_run_did_not_write_is_refused_not_removed(tmp_path):
    out = tmp_path / "out"
    r = recipe(out, lora=4)
    r.setup()
    (out / "base").mkdir()
    (out / "base" / "notes.txt").write_text("the user's")
    with pytest.raises(TrainerError, match=f"{out / 'base'} is there and this run did not "
                                           "write it"):
        r.run()
    assert (out / "base" / "notes.txt").read_text() == "the user's"


# === modes ===================================================================


def modes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode)
            for p in [folder, *folder.rglob("*")]}


def test_saved_files_are_the_users_alone_under_umask_022(tmp_path):
    out = tmp_path / "out"
    proc = trainer(*CLI, "--steps", "2", "--checkpoint-every", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    found = modes(out)
    assert found["."] == 0o700 and found["model.safetensors"] == 0o600
    assert found[ownership.CLAIM_NAME] == 0o600 and found["config.json"] == 0o600
    assert not [name for name, mode in found.items() if mode & 0o077]  # checkpoints too


def test_output_mode_shares_them_with_the_group(tmp_path):
    out = tmp_path / "out"
    proc = trainer(*CLI, "--steps", "2", "--out", str(out), "--output-mode", "0750")
    assert proc.returncode == 0, proc.stderr
    found = modes(out)
    assert found["."] == 0o750 and found["model.safetensors"] == 0o640


def test_a_named_models_base_folder_is_private_too(tmp_path):
    old = os.umask(0o022)
    try:
        train(tmp_path / "out", lora=4)
    finally:
        os.umask(old)
    found = modes(tmp_path / "out")
    assert found["base"] == 0o700 and found["base/model.safetensors"] == 0o600
    assert found["adapter_model.safetensors"] == 0o600


@pytest.mark.parametrize("mode, words", [
    ("0777", "group and others at most read and traverse"),
    ("0600", "the owner needs rwx"),
    ("0700x", "give octal digits"),
])
def test_an_output_mode_others_could_write_or_the_owner_could_not_is_one_line(tmp_path, mode,
                                                                              words):
    proc = trainer(*CLI, "--steps", "2", "--out", str(tmp_path / "out"), "--output-mode", mode)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"--output-mode: {mode!r}: " in proc.stderr and words in proc.stderr


def test_the_homes_output_mode_is_checked_with_the_config():
    from daemon.errors import ConfigError
    from daemon.home import parse_config

    assert parse_config('[daemon]\noutput_mode = "0750"\n').daemon.output_mode == "0750"
    with pytest.raises(ConfigError, match=r"\[daemon\] output_mode '0777': the owner needs"):
        parse_config('[daemon]\noutput_mode = "0777"\n')
