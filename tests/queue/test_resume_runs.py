"""`rngdctl resume RUN...`: an ended run back in the queue as itself, to go on."""

from __future__ import annotations

import json

import pytest

from daemon.errors import BadInput
from daemon.home import parse_config
from daemon.scheduling.queueing import resume_runs

CONFIG = {"cards": 1, "resident": 0, "steps": 5}


def test_an_ended_run_goes_back_in_the_queue_as_itself_naming_its_newest_checkpoint(store):
    run = store.add_run(CONFIG)
    store.finish_run(run, "timeout", reason="deadline of 60 s passed", exit_code=143)
    store.add_event_once(run, "checkpoint", "step-40", data={"path": "/o/checkpoints/step-40",
                                                             "step": 40}, when=5.0)

    [(run_id, newest)] = resume_runs(store, [run])

    again = store.run(run)
    assert run_id == run and newest["step"] == 40
    assert (again["status"], again["ended"], again["exit_reason"]) == ("queued", None, None)
    assert store.head_of_queue()["id"] == run
    [event] = store.events(run_id=run, kinds=["resume_requested"])
    assert "after it ended timeout: goes on from /o/checkpoints/step-40 (main step 40)" in \
        event["message"]


@pytest.mark.parametrize("status, words", [("done", "is done: nothing to resume"),
                                           ("queued", "is queued: only an ended run")])
def test_a_run_that_has_not_ended_or_ended_done_is_refused_in_one_line(store, status, words):
    run = store.add_run(CONFIG)
    if status == "done":
        store.finish_run(run, "done")
    with pytest.raises(BadInput, match=words):
        resume_runs(store, [run])


def test_the_resume_command_prints_where_each_run_goes_on_from(store, rngdctl):
    run = store.add_run(CONFIG)
    store.finish_run(run, "failed")
    code, out, _ = rngdctl("resume", str(run))
    assert code == 0
    assert out == f"run {run} queued again: goes on from the newest checkpoint in its " \
                  "output folder, if any\n"
    code, out, err = rngdctl("resume", str(run), "--json")
    assert code == 2 and "is queued: only an ended run can be resumed" in err
    assert "Traceback" not in err


def test_stop_grace_replaces_cancel_grace_which_is_still_read():
    assert parse_config("").daemon.stop_grace_s == 120.0
    assert parse_config("[daemon]\ncancel_grace = 10.0\n").daemon.stop_grace_s == 10.0
    assert parse_config("[daemon]\ncancel_grace = 10.0\nstop_grace_s = 30.0\n"
                        ).daemon.stop_grace_s == 30.0


def test_a_bad_checkpoint_failure_setting_is_one_line():
    from daemon.errors import ConfigError

    with pytest.raises(ConfigError, match="checkpoint_failure must be continue or stop"):
        parse_config('[daemon]\ncheckpoint_failure = "retry"\n')


@pytest.mark.parametrize("options, words", [
    ({"merge": True}, "--merge needs --lora"),
    ({"eval_split": 1.0}, "--eval-split must be a fraction"),
    ({"eval_every": 10}, "--eval-every needs --eval-data or --eval-split"),
    ({"checkpoint_every": 0}, "--checkpoint-every must be >= 1"),
])
def test_output_options_that_cannot_work_are_refused_at_submit(options, words):
    from daemon.run.spec import validate

    with pytest.raises(BadInput, match=words):
        validate({**CONFIG, **options})


def test_submit_passes_the_output_options_to_the_trainer(tmp_path):
    from daemon.run.spec import trainer_argv, validate

    config = validate({**CONFIG, "lora": 8, "merge": True, "checkpoint_every": 25,
                       "keep_checkpoints": 3, "eval_split": 0.05, "eval_every": 50})
    argv = trainer_argv({"id": 7, "config": config}, log_path=None, python="python",
                        out_dir=str(tmp_path), on_checkpoint_error="stop")
    text = " ".join(argv)
    assert f"--out {tmp_path} --keep-checkpoints 3 --checkpoint-every 25" in text
    assert "--merge" in argv and "--on-checkpoint-error stop" in text
    assert "--eval-split 0.05 --eval-every 50" in text
    assert json.dumps(config)  # stored as JSON
