"""MLflow: each run an MLflow run on a real `mlflow server` (SQLite store), read back with
MlflowClient; every point once, whatever is sent twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.errors import BadInput
from daemon.trackers.mlflow import MLflow, check_uri
from daemon.trackers.send import send_all
from tests.trackers.tracker_support import free_port, more_steps, needs_mlflow
from trainer import records


def history(client, remote: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(remote, key))


@pytest.mark.parametrize("uri", ["ftp://host/x", "127.0.0.1:5000", "http://", "file:///tmp/m",
                                 "http://host:5000/?x=1"])
def test_an_address_that_is_not_a_tracking_servers_is_refused_in_one_line(uri):
    with pytest.raises(BadInput, match=r"^--mlflow: ") as err:
        check_uri(uri)
    assert "\n" not in str(err.value)


@needs_mlflow
def test_a_run_reads_back_with_its_steps_evals_model_config_status_and_note(
        store, tracked_run, mlflow_server):
    run = store.run(tracked_run(20))
    sink = MLflow(mlflow_server.uri, experiment="reads-back")

    send_all(store, sink, run, note=lambda store, run_id: ("note.md", f"# run {run_id}"))

    client = mlflow_server.client()
    remote = store.tracker_run(sink.key, run["id"])["remote"]
    found = client.get_run(remote)
    assert found.info.status == "FINISHED" and found.info.run_name == "chat"
    assert found.data.tags["rngdctl.run"] == str(run["id"])
    assert found.data.params["lr"] == "1e-05" and found.data.params["baseline"] == "true"
    assert found.data.params["layers"] == "32" and "lora" not in found.data.params
    stored = store.steps(run["id"])
    assert history(client, remote, "train/loss") == [(s["step"], pytest.approx(s["loss"]))
                                                     for s in stored]
    assert [s for s, _ in history(client, remote, "baseline/train/loss")] == list(range(1, 21))
    assert [s for s, _ in history(client, remote, "phase/fwd_bwd")] == list(range(1, 21))
    assert history(client, remote, "eval/loss") == [(0, 2.5), (10, 2.4), (20, 2.3)]
    from daemon import stepmodel

    comparison = stepmodel.for_run(store, run["id"])
    assert history(client, remote, "stepmodel/error") == [(20, comparison.error)]
    assert history(client, remote, "stepmodel/interval") == [(20, comparison.interval)]
    assert found.data.tags["rngdctl.note"] == "note/note.md"
    path = client.download_artifacts(remote, "note/note.md")
    assert Path(path).read_text() == f"# run {run['id']}"


@needs_mlflow
def test_a_batch_sent_again_after_a_lost_cursor_keeps_each_point_once(store, tracked_run,
                                                                      mlflow_server):
    run = store.run(tracked_run(10))
    sink = MLflow(mlflow_server.uri, experiment="sent-again")
    send_all(store, sink, run)
    remote = store.tracker_run(sink.key, run["id"])["remote"]
    # A daemon killed between the server's answer and the cursor: the cursors are lost,
    # the MLflow run's id too; everything is sent again.
    store.forget_tracker_run(sink.key, run["id"])

    send_all(store, sink, run)

    client = mlflow_server.client()
    assert store.tracker_run(sink.key, run["id"])["remote"] == remote  # found, not made again
    assert [s for s, _ in history(client, remote, "train/loss")] == list(range(1, 11))
    assert [s for s, _ in history(client, remote, "stepmodel/error")] == [10]
    assert len(client.search_runs([client.get_run(remote).info.experiment_id])) == 1


@needs_mlflow
def test_export_sends_to_mlflow_and_twice_sends_nothing_new(store, tracked_run, mlflow_server,
                                                           rngdctl):
    run_id = tracked_run(6)

    first = rngdctl("export", str(run_id), "--mlflow", mlflow_server.uri, "--json")
    second = rngdctl("export", str(run_id), "--mlflow", mlflow_server.uri, "--json")

    assert first[0] == 0 and second[0] == 0, first[2] + second[2]
    [one], [two] = json.loads(first[1])["sent"], json.loads(second[1])["sent"]
    assert (one["points"], two["points"]) == (2 * 6 + 1 + 1, 0)
    remote = store.tracker_run(f"mlflow:{mlflow_server.uri}", run_id)["remote"]
    assert one["where"].endswith(f"/runs/{remote}")
    client = mlflow_server.client()
    assert [s for s, _ in history(client, remote, "train/loss")] == list(range(1, 7))


@needs_mlflow
def test_a_resumed_run_is_running_again_there_and_ends_again(store, tracked_run,
                                                           mlflow_server):


    run_id = tracked_run(6, status="failed")
    sink = MLflow(mlflow_server.uri, experiment="resumed")
    send_all(store, sink, store.run(run_id))
    assert store.requeue_ended(run_id, ["failed"])
    store.claim_for_launch(run_id, launcher="local")
    more_steps(store, run_id, 7, 9)

    send_all(store, sink, store.run(run_id))
    client = mlflow_server.client()
    remote = store.tracker_run(sink.key, run_id)["remote"]
    assert client.get_run(remote).info.status == "RUNNING"

    store.finish_run(run_id, "done")
    send_all(store, sink, store.run(run_id))
    assert client.get_run(remote).info.status == "FINISHED"
    assert [s for s, _ in history(client, remote, "train/loss")] == list(range(1, 10))
    assert store.tracker_pass(sink.key, run_id, records.MAIN)["step"] == 9


def test_an_unreachable_server_is_one_line(store, tracked_run, rngdctl):


    run_id = tracked_run(3)

    code, out, err = rngdctl("export", str(run_id), "--mlflow",
                             f"http://127.0.0.1:{free_port()}")

    assert code == 1 and out == ""
    assert err.startswith("Error: http://127.0.0.1:") and "refused" in err
    assert err.count("\n") == 1
