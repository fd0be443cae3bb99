"""`edit` of a run that will resume: a change its checkpoint cannot go on with is refused in
one line naming the key (it would fail at launch, an attempt lost); a change back is taken."""

from __future__ import annotations

import dataclasses
import json

import pytest

from daemon.errors import BadInput
from daemon.run import resumable
from daemon.run.spec import trainer_argv, validate
from daemon.scheduling.queueing import edit_run, resume_runs
from trainer.config import RESUME_KEYS, TrainConfig

CONFIG = {"cards": 1, "resident": 2, "steps": 60, "seq_len": 64, "accum": 2, "lr": 1e-3,
          "checkpoint_every": 20}


def trainer_config(config: dict, run_id: int = 1) -> TrainConfig:
    """The TrainConfig the trainer builds from the argv the launchers give it."""
    from trainer.cli import build_parser

    argv = trainer_argv({"id": run_id, "config": config}, log_path=None, python="python",
                        out_dir="/out")
    args = build_parser().parse_args(argv[3:])
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {k: v for k, v in vars(args).items() if k in fields}
    return TrainConfig(**values, checkpoint=args.checkpoint_layers)


def checkpointed(store, home, config: dict = CONFIG, status: str = "cancelled") -> int:
    """A run that ended after writing its checkpoint at step 20, as the trainer writes it."""
    from trainer.output.folder import fingerprint

    run = store.add_run(validate(config))
    folder = home.path / "runs" / str(run) / "model" / "checkpoints" / "step-20"
    folder.mkdir(parents=True)
    state = {"run_id": str(run), "fingerprint": fingerprint(trainer_config(store.run(run)[
        "config"], run)), "step": 20, "passes": {}}
    (folder / resumable.MANIFEST).write_text(json.dumps({"format": 2, "state": state}))
    store.add_event(run, "checkpoint", "step-20: 1.0 MB in 0.01 s",
                    data={"path": str(folder), "step": 20})
    store.finish_run(run, status, reason="stopped by SIGTERM after main step 25")
    return run


@pytest.mark.parametrize("config", [
    CONFIG,
    {**CONFIG, "cards": 2, "resident": 1, "baseline": True},
    {**CONFIG, "baseline": True, "interleave": 0, "baseline_steps": 7},
    {**CONFIG, "lora": 8, "eval_split": 0.05, "backend": "cuda:0", "seed": 3},
])
def test_the_daemons_resume_values_are_the_trainers_for_the_argv_it_is_given(config):
    config = validate(config)
    theirs = dataclasses.asdict(trainer_config(config))
    assert resumable.trainer_values(config) == {k: theirs[k] for k in RESUME_KEYS}


def test_the_manifests_name_is_the_checkpoint_writers():
    from trainer.output import checkpoint

    assert resumable.MANIFEST == checkpoint.MANIFEST


def test_editing_a_resumed_runs_steps_is_refused_in_one_line_naming_the_key(store, home,
                                                                           rngdctl):
    run = checkpointed(store, home)
    resume_runs(store, [run])

    code, out, err = rngdctl("edit", str(run), "--set", "steps=70")

    assert (code, out) == (2, "")
    path = home.path / "runs" / str(run) / "model" / "checkpoints" / "step-20"
    assert err == (f"Error: run {run} goes on from {path}, written with steps 60: steps 70 "
                   f"would fail there at launch (a checkpoint resumes only its own config); "
                   f"keep steps 60, or start a new run with `rngdctl clone {run} --set "
                   f"steps=70`\n")
    assert store.run(run)["config"]["steps"] == 60


@pytest.mark.parametrize("setting, key", [("seq-len=128", "seq-len"), ("resident=0", "resident"),
                                          ("cards=2", "backend"), ("lr=2e-3", "lr"),
                                          ("baseline=true", "baseline")])
def test_each_resume_key_a_setting_changes_is_named(store, home, setting, key):
    run = checkpointed(store, home, {**CONFIG, "resident": 1})
    resume_runs(store, [run])
    with pytest.raises(BadInput, match=f"written with {key} .* would fail there at launch"):
        edit_run(store, run, [setting])


def test_a_change_the_checkpoint_does_not_hold_is_taken(store, home):
    run = checkpointed(store, home)
    resume_runs(store, [run])

    _, changes = edit_run(store, run, ["deadline=600", "checkpoint-every=10"])

    assert changes == {"deadline": (None, 600), "checkpoint_every": (20, 10)}


def test_a_run_that_failed_on_another_configs_checkpoint_can_be_edited_back(store, home):
    run = checkpointed(store, home)
    resume_runs(store, [run])
    # As `edit` let through before: the config changed under its checkpoint, and the
    # trainer refused it at launch.
    store.replace_queued_config(run, {**store.run(run)["config"], "steps": 70})
    store.finish_run(run, "failed", reason="written by another config (steps: 60 there, 70 here)")
    resume_runs(store, [run])

    with pytest.raises(BadInput, match="steps 80 would fail there"):
        edit_run(store, run, ["steps=80"])
    edited, changes = edit_run(store, run, ["steps=60"])

    assert changes == {"steps": (70, 60)} and edited["status"] == "queued"


def test_a_queued_run_with_no_checkpoint_of_its_own_is_edited_freely(store, home):
    run = checkpointed(store, home)
    manifest = next((home.path / "runs" / str(run)).rglob(resumable.MANIFEST))
    body = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**body, "state": {**body["state"], "run_id": "99"}}))
    resume_runs(store, [run])

    _, changes = edit_run(store, run, ["steps=70"])

    assert changes == {"steps": (60, 70)}


# === end to end: the real daemon and trainer =======================================


def until_idle(home) -> None:
    from tests.spine.test_resume import start_daemon

    daemon = start_daemon(home)
    assert daemon.wait(timeout=300) == 0, daemon.stderr.read()


@pytest.mark.slow
def test_a_run_that_failed_on_its_checkpoint_is_edited_back_and_resumes_to_the_end(
        home, store, rngdctl):
    from procs import wait_for

    from tests.spine.test_resume import start_daemon

    steps = 1000  # long enough to be running still when the test cancels it
    _, out, _ = rngdctl("submit", "--cards", "1", "--resident", "1", "--seq-len", "16",
                        "--accum", "1", "--lr", "1e-3", "--steps", str(steps),
                        "--checkpoint-every", "4")
    run = int(out)
    daemon = start_daemon(home)

    def past_a_checkpoint():
        with home.store() as s:
            return s.events(run_id=run, kinds=["checkpoint"]) and \
                s.step_counts(run).get("main", 0) >= 6
    wait_for(past_a_checkpoint, timeout=180)
    assert rngdctl("cancel", str(run))[0] == 0  # SIGTERM: the trainer checkpoints and stops
    assert daemon.wait(timeout=300) == 0, daemon.stderr.read()
    assert store.run(run)["status"] == "cancelled"

    assert rngdctl("resume", str(run))[0] == 0
    code, _, err = rngdctl("edit", str(run), "--set", f"steps={steps + 10}")
    assert code == 2 and f"written with steps {steps}: steps {steps + 10} would fail" in err

    # What `edit` let through before: the trainer refuses the checkpoint at launch.
    store.replace_queued_config(run, {**store.run(run)["config"], "steps": steps + 10})
    until_idle(home)
    failed = store.run(run)
    assert failed["status"] == "failed" and "written by another config" in failed["exit_reason"]

    assert rngdctl("resume", str(run))[0] == 0
    code, out, err = rngdctl("edit", str(run), "--set", f"steps={steps}")
    assert code == 0, err
    until_idle(home)

    done = store.run(run)
    assert done["status"] == "done", done["exit_reason"]
    assert [s["step"] for s in store.steps(run)] == list(range(1, steps + 1))
    assert store.events(run_id=run, kinds=["resume"])
