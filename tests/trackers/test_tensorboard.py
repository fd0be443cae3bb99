"""TensorBoard: each run's event files, read back with TensorBoard's own reader; every
point once, whatever is exported twice, cut short or lost."""

from __future__ import annotations

import json
import math
import os

import pytest

from daemon.errors import BadInput
from daemon.trackers import tfevents
from daemon.trackers.send import send_all, send_run
from daemon.trackers.tensorboard import TensorBoard
from tests.trackers.tracker_support import (
    more_steps,
    needs_tensorboard,
    read_accumulator,
    read_events,
)
from trainer import ownership, records

#: A scalar goes in as a float32: within half its epsilon of the value sent.
F32 = 2 ** -24


def steps_of(events: dict, tag: str) -> list[int]:
    return [step for step, _ in events[tag]]


def values_of(events: dict, tag: str) -> list[float]:
    return [value for _, value in events[tag]]


def test_crc32c_is_castagnolis():
    assert tfevents.crc32c(b"123456789") == 0xE3069283  # the standard check value


@needs_tensorboard
def test_a_run_goes_to_its_own_folder_with_steps_phases_evals_model_config_and_note(
        store, tracked_run, tmp_path):
    run = store.run(tracked_run(20))

    sent = send_all(store, TensorBoard(tmp_path / "tb"), run,
                    note=lambda store, run_id: ("note.md", f"# run {run_id}\nthe note"))

    folder = tmp_path / "tb" / f"run-{run['id']}-chat"
    main, baseline = read_events(folder), read_events(folder / "baseline")
    assert steps_of(main, "train/loss") == list(range(1, 21))
    assert steps_of(baseline, "train/loss") == list(range(1, 21))
    stored = store.steps(run["id"])
    assert values_of(main, "train/step_s") == pytest.approx([s["step_s"] for s in stored],
                                                            rel=F32)
    assert values_of(main, "train/tokens_per_s") == pytest.approx(
        [s["tokens"] / s["step_s"] for s in stored], rel=F32)
    assert {f"phase/{p}" for p in stored[-1]["phases"]} <= set(main)
    assert steps_of(main, "eval/loss") == [0, 10, 20]
    assert values_of(main, "eval/loss") == pytest.approx([2.5, 2.4, 2.3], rel=F32)
    from daemon import stepmodel

    comparison = stepmodel.for_run(store, run["id"])
    assert steps_of(main, "stepmodel/error") == [20]
    assert values_of(main, "stepmodel/error") == pytest.approx([comparison.error], rel=F32)
    assert values_of(main, "stepmodel/interval") == pytest.approx([comparison.interval],
                                                                  rel=F32)
    assert sent == 2 * 20 + 3 + 1  # the steps of both passes, the evals, the end
    reader = read_accumulator(folder)
    [note] = reader.Tensors("note")
    assert (note.step, note.tensor_proto.string_val) == (20, [f"# run {run['id']}\nthe note"
                                                              .encode()])
    assert ownership.read_owner(folder) == ownership.Owner(str(run["id"]), store.home_id)


@needs_tensorboard
def test_the_config_goes_in_as_the_hparams_plugins_hyperparameters_and_the_end_as_its_status(
        store, tracked_run, tmp_path):
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    run = store.run(tracked_run(8))
    send_all(store, TensorBoard(tmp_path / "tb"), run)

    reader = read_accumulator(tmp_path / "tb" / f"run-{run['id']}-chat")
    content = reader.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(
        content[tfevents.SESSION_START_TAG]).session_start_info
    end = plugin_data_pb2.HParamsPluginData.FromString(
        content[tfevents.SESSION_END_TAG]).session_end_info
    assert start.hparams["lr"].number_value == 1e-5
    assert start.hparams["model"].string_value == "tiny-llama"
    assert start.hparams["baseline"].bool_value is True
    assert start.hparams["layers"].number_value == 32  # what the trainer said it ran
    assert "lora" not in start.hparams  # unset
    assert end.status == api_pb2.STATUS_SUCCESS


@needs_tensorboard
def test_exporting_twice_gives_each_point_once(store, tracked_run, tmp_path, rngdctl):
    run_id = tracked_run(20)
    folder = tmp_path / "tb" / f"run-{run_id}-chat"

    first = rngdctl("export", str(run_id), "--tensorboard", str(tmp_path / "tb"))
    size = {p.name: p.stat().st_size for p in folder.iterdir()}
    second = rngdctl("export", str(run_id), "--tensorboard", str(tmp_path / "tb"), "--json")

    assert first[0] == 0 and first[1] == f"run {run_id}: 44 new points -> {folder}\n"
    assert second[0] == 0 and json.loads(second[1])["sent"][0]["points"] == 0
    assert {p.name: p.stat().st_size for p in folder.iterdir()} == size
    assert steps_of(read_events(folder), "train/loss") == list(range(1, 21))


@needs_tensorboard
def test_steps_stored_later_are_appended_each_once(store, tracked_run, tmp_path):
    run_id = tracked_run(10, status=None)
    tb = TensorBoard(tmp_path / "tb")
    send_all(store, tb, store.run(run_id))

    more_steps(store, run_id, 11, 25)
    send_all(store, tb, store.run(run_id))

    events = read_events(tmp_path / "tb" / f"run-{run_id}-chat")
    assert steps_of(events, "train/loss") == list(range(1, 26))
    assert "stepmodel/error" not in events  # still running: no end yet


@needs_tensorboard
def test_bytes_written_past_the_cursor_are_cut_before_the_next_write(store, tracked_run,
                                                                    tmp_path):
    run_id = tracked_run(12, status=None)
    tb = TensorBoard(tmp_path / "tb")
    send_run(store, tb, store.run(run_id), limit=5)
    cursor = store.tracker_pass(tb.key, run_id, records.MAIN)
    # A writer killed between its write and its cursor: steps 6-105 are in the file,
    # uncounted, more bytes than what is written there next.
    with open(cursor["file"], "ab") as f:
        f.writelines(tfevents.scalars_event(1.0, step, {"train/loss": 9.0, "train/lr": 9.0})
                     for step in range(6, 106))

    send_all(store, tb, store.run(run_id))

    events = read_events(tmp_path / "tb" / f"run-{run_id}-chat")
    assert steps_of(events, "train/loss") == list(range(1, 13))
    assert 9.0 not in [v for _, v in events["train/loss"]]
    after = store.tracker_pass(tb.key, run_id, records.MAIN)
    assert os.path.getsize(after["file"]) == after["size"]  # nothing uncounted is left


@needs_tensorboard
def test_a_lost_folder_is_claimed_and_written_again_whole(store, tracked_run, tmp_path):
    import shutil

    run = store.run(tracked_run(6))
    tb = TensorBoard(tmp_path / "tb")
    send_all(store, tb, run)
    folder = tmp_path / "tb" / f"run-{run['id']}-chat"
    shutil.rmtree(folder)

    assert send_all(store, tb, run) == 2 * 6 + 1 + 1

    events = read_events(folder)
    assert steps_of(events, "train/loss") == list(range(1, 7))
    assert steps_of(events, "stepmodel/error") == [6]


@needs_tensorboard
def test_a_file_shorter_than_its_cursor_is_written_again_whole(store, tracked_run, tmp_path):
    run = store.run(tracked_run(6))
    tb = TensorBoard(tmp_path / "tb")
    send_all(store, tb, run)
    path = store.tracker_pass(tb.key, run["id"], records.MAIN)["file"]
    os.truncate(path, os.path.getsize(path) // 2)  # a power cut lost its tail

    send_all(store, tb, run)

    events = read_events(tmp_path / "tb" / f"run-{run['id']}-chat")
    assert steps_of(events, "train/loss") == list(range(1, 7))
    assert steps_of(events, "stepmodel/error") == [6]


def test_a_folder_another_run_claims_is_refused_in_one_line(store, tracked_run, tmp_path,
                                                            rngdctl):
    run_id = tracked_run(4)
    folder = tmp_path / "tb" / f"run-{run_id}-chat"
    ownership.claim(folder, ownership.Owner(str(run_id), "another-home"))

    code, out, err = rngdctl("export", str(run_id), "--tensorboard", str(tmp_path / "tb"))

    assert code == 2 and out == ""
    assert err.startswith(f"Error: TensorBoard {tmp_path / 'tb'}: TensorBoard folder {folder} "
                          "holds the output of run")
    assert err.count("\n") == 1
    assert sorted(p.name for p in folder.iterdir()) == [ownership.CLAIM_NAME]


def test_a_folder_rngdctl_did_not_make_is_not_written(store, tracked_run, tmp_path):
    run = store.run(tracked_run(4))
    folder = tmp_path / "tb" / f"run-{run['id']}-chat"
    folder.mkdir(parents=True)
    (folder / "mine.txt").write_text("a user's file")

    with pytest.raises(BadInput, match="is not empty and no rngdctl run claims it"):
        send_all(store, TensorBoard(tmp_path / "tb"), run)

    assert sorted(p.name for p in folder.iterdir()) == ["mine.txt"]


@needs_tensorboard
def test_a_nan_loss_goes_in_as_nan(store, tracked_run, tmp_path):
    from daemon.run.ingest import Ingest
    from tests.stepmodel.synthetic_logs import make_pass

    run_id = tracked_run(5, status=None)
    step = make_pass(cards=2, resident_per_card=8, label=records.MAIN, raw=False, steps=6)[-1]
    Ingest(store).feed(run_id, [records.dumps(step.__class__(**{**step.__dict__,
                                                                "loss": math.nan}))])

    send_all(store, TensorBoard(tmp_path / "tb"), store.run(run_id))

    [(step_no, loss)] = read_events(tmp_path / "tb" / f"run-{run_id}-chat")["train/loss"][-1:]
    assert step_no == 6 and math.isnan(loss)
