"""--data as a Parquet file or a folder datasets' save_to_disk wrote, read within bounds."""

from __future__ import annotations

import json

import pytest

from trainer import datafile, datatable
from trainer.data import batches
from trainer.data.formats import Conversation, Example
from trainer.errors import UsageError

pa = pytest.importorskip("pyarrow", reason="pyarrow (the trainer extra) reads Parquet and "
                                           "datasets folders")
pq = pytest.importorskip("pyarrow.parquet")

ROWS = [{"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": f"hello {n}"},
                      {"role": "assistant", "content": f"fine {n}"}]} for n in range(5)]
CHATS = [Conversation((("system", "Be brief."), ("user", f"hello {n}"),
                       ("assistant", f"fine {n}"))) for n in range(5)]


def saved(rows: list[dict]):
    """A datasets Dataset of ``rows`` (its fingerprint given: datasets 5.2 cannot hash an
    Arrow table under pyarrow 26 here)."""
    datasets = pytest.importorskip("datasets", reason="datasets writes the folders read here")
    from datasets.table import InMemoryTable

    return datasets.Dataset(InMemoryTable(pa.Table.from_pylist(rows)),
                            fingerprint=f"{len(rows):016x}")


def test_a_parquet_file_of_messages_reads_as_the_same_chats(tmp_path):
    path = tmp_path / "chat.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    for spec in (str(path), f"parquet:{path}"):
        source = batches.open_source(spec)
        assert source.kind == "parquet" and source.examples == CHATS


def test_a_parquet_file_of_prompts_and_responses(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "질문", "response": "답"}] * 3), path)
    assert batches.open_source(str(path)).examples == [Example("질문", "답")] * 3


def test_a_saved_dataset_and_a_dataset_dicts_train_split(tmp_path):
    datasets = pytest.importorskip("datasets", reason="datasets writes the folders read here")
    saved(ROWS).save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": saved(ROWS), "test": saved(ROWS[:2])}).save_to_disk(
        str(tmp_path / "both"))
    assert batches.open_source(str(tmp_path / "one")).examples == CHATS
    assert batches.open_source(f"datasets:{tmp_path / 'both'}").examples == CHATS
    assert batches.open_source(str(tmp_path / "both" / "test")).examples == CHATS[:2]
    assert datafile.named(str(tmp_path / "one")) == ("datasets", tmp_path / "one")


def test_a_parquet_file_past_max_data_bytes_is_refused_on_disk_and_unpacked(tmp_path):
    path = tmp_path / "big.parquet"
    pq.write_table(pa.Table.from_pylist([{"text": "x" * 20_000}] * 50), path,
                   compression="zstd")
    on_disk = path.stat().st_size
    with pytest.raises(UsageError, match="past --max-data-bytes"):
        datatable.check(path, max_bytes=on_disk - 1)
    with pytest.raises(UsageError, match="bytes once uncompressed, past --max-data-bytes"):
        datatable.check(path, max_bytes=on_disk + 1)  # a million bytes of x compress well


def test_a_row_longer_than_an_example_is_refused_naming_it(tmp_path, monkeypatch):
    path = tmp_path / "long.parquet"
    pq.write_table(pa.Table.from_pylist([{"text": "short"}, {"text": "y" * 200}]), path)
    monkeypatch.setattr(datatable, "MAX_LINE_BYTES", 100)
    with pytest.raises(UsageError, match=r"long.parquet row 2: 200 bytes of text"):
        datatable.check(path, max_bytes=1 << 20)


@pytest.mark.parametrize("name", ["../elsewhere.arrow", "/etc/passwd", "", 7])
def test_a_state_json_naming_a_file_outside_its_folder_is_refused(tmp_path, name):
    saved(ROWS).save_to_disk(str(tmp_path / "d"))
    state = json.loads((tmp_path / "d" / "state.json").read_text())
    state["_data_files"] = [{"filename": name}]
    (tmp_path / "d" / "state.json").write_text(json.dumps(state))
    with pytest.raises(UsageError, match="not a file in the folder"):
        datatable.check(tmp_path / "d", max_bytes=1 << 20)


def test_a_folder_datasets_did_not_write_and_a_dict_without_train_are_refused(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(UsageError, match="not one that datasets' save_to_disk wrote"):
        batches.open_source(str(tmp_path / "plain"))
    (tmp_path / "dict").mkdir()
    (tmp_path / "dict" / "dataset_dict.json").write_text('{"splits": ["test"]}')
    with pytest.raises(UsageError, match="without a train split; give one of its splits' "
                                         "folders"):
        batches.open_source(str(tmp_path / "dict"))


def test_not_parquet_is_one_line(tmp_path):
    path = tmp_path / "fake.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(UsageError, match="not a Parquet file pyarrow can read"):
        datatable.check(path, max_bytes=1 << 20)


def test_a_fifo_named_as_parquet_is_refused_without_blocking(tmp_path):
    import os

    path = tmp_path / "pipe.parquet"
    os.mkfifo(path)
    with pytest.raises(UsageError, match="not a regular file"):
        datatable.check(path, max_bytes=1 << 20)


def test_submit_reads_a_table_as_the_trainer_does(tmp_path):
    from daemon.errors import BadInput
    from daemon.run.spec import _check_data

    path = tmp_path / "chat.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    assert _check_data(str(path)) == f"parquet:{path.resolve()}"
    saved(ROWS).save_to_disk(str(tmp_path / "folder"))
    assert _check_data(str(tmp_path / "folder")) == f"datasets:{(tmp_path / 'folder').resolve()}"
    with pytest.raises(BadInput, match="past --max-data-bytes"):
        _check_data(str(path), max_bytes=10)
    with pytest.raises(BadInput, match="no file at"):
        _check_data(str(tmp_path / "missing.parquet"))


def test_the_digest_of_a_folder_changes_with_any_of_its_data_files(tmp_path):
    from trainer.data import cache

    saved(ROWS).save_to_disk(str(tmp_path / "d"))
    before = cache.digest("datasets", tmp_path / "d")
    saved(ROWS[:4]).save_to_disk(str(tmp_path / "d2"))
    assert cache.digest("datasets", tmp_path / "d2") != before
    assert cache.digest("datasets", tmp_path / "d") == before
