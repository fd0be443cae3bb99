"""The data a pass reads, in its start record, as the daemon reads it; --pack through submit."""

from __future__ import annotations

import dataclasses

from daemon.run import resumable
from daemon.run.ingest import Ingest
from daemon.run.spec import trainer_argv, validate
from trainer import records
from trainer.config import RESUME_KEYS

DATA = {"source": "jsonl", "form": "chat", "examples": 4096, "rows": 410, "seq_len": 512,
        "packed": True, "real_tokens": 2_031_000, "padding_share": 0.0313,
        "fitted": {"prompt_cut": 0, "turns_dropped": 12, "answer_cut": 1, "skipped": 0},
        "cache": "read"}


def start(data: dict | None = None) -> records.Start:
    return records.Start("main", {"cards": 1}, time=1.0, data=data or {})


def test_a_start_records_data_goes_through_as_it_was_written():
    parsed = records.parse_line(records.dumps(start(DATA)))
    assert parsed == start(DATA)
    assert set(DATA) == set(records.DATA_KEYS)


def test_a_start_record_of_an_older_trainer_has_no_data_and_keeps_version_1():
    line = records.dumps(start())
    assert '"data"' not in line and '"v":1' in line
    assert records.parse_line(line).data == {}


def test_data_that_is_not_an_object_makes_the_record_malformed():
    line = records.dumps(start()).replace('"time":1.0', '"time":1.0,"data":[1]')
    assert isinstance(records.parse_line(line), records.Malformed)


def test_the_data_is_said_in_one_line_and_anything_odd_is_left_out():
    assert records.describe_data(DATA) == (
        "4,096 chat examples in 410 packed rows of 512, padding 3.1%; longer than --seq-len: "
        "12 turns dropped, 1 answer cut (cache: read)")
    assert records.describe_data({"examples": "many", "fitted": {"skipped": True}}) == "data"


def test_ingest_keeps_the_passs_data_as_an_event(store):
    run = store.add_run({"cards": 1})
    ingest = Ingest(store)
    ingest.feed(run, [records.dumps(start(DATA))])
    ingest.feed(run, [records.dumps(start(DATA))])  # read again: kept once
    (event,) = [e for e in store.events(run_id=run) if e["kind"] == "data"]
    assert event["message"] == f"main: {records.describe_data(DATA)}"
    assert event["data"] == DATA


def test_pack_reaches_the_trainer_and_its_resume_values():
    from trainer.cli import build_parser

    config = validate({"cards": 1, "pack": True})
    argv = trainer_argv({"id": 3, "config": config}, log_path=None, python="python")
    assert "--pack" in argv
    assert build_parser().parse_args(argv[3:]).pack is True
    assert resumable.trainer_values(config)["pack"] is True
    assert "--pack" not in trainer_argv({"id": 3, "config": validate({"cards": 1})},
                                        log_path=None, python="python")


def test_a_checkpoint_written_before_pack_existed_resumes_an_unpacked_run():
    from trainer.config import TrainConfig
    from trainer.output.folder import differences, fingerprint

    ours = fingerprint(TrainConfig())
    older = {k: v for k, v in ours.items() if k != "pack"}
    assert "pack" in RESUME_KEYS and differences(older, ours) == []
    packed = fingerprint(dataclasses.replace(TrainConfig(), pack=True))
    assert differences(older, packed) == ["pack: False there, True here"]
