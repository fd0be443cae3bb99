"""The daemon's trackers: sent off the tick by one thread, from the store; a tracker that is
down or hangs costs ingest nothing and catches up, a restart goes on from the cursors."""

from __future__ import annotations

import select
import socket
import time

from daemon.store import Store
from daemon.trackers.tensorboard import TensorBoard
from daemon.trackers.worker import BACK, FAILED, SAY_AGAIN_S, TrackerWorker
from tests.procs import wait_for
from tests.trackers.tracker_support import (
    T0,
    MlflowServer,
    free_port,
    needs_mlflow,
    needs_tensorboard,
    read_events,
    step_lines,
)
from trainer import ownership, records


def tracker_events(store, kind: str, run_id: int | None = None) -> list[dict]:
    return [e for e in store.events(run_id=run_id) if e["kind"] == kind]


def sync_all(worker: TrackerWorker, store, now: float) -> None:
    """Rounds until nothing is left to send (a round stops at its CPU budget)."""
    while worker.sync(store, now=now):
        pass


def launched(store, tracked_run) -> int:
    """A running run with steps 1-5 of both passes stored."""
    return tracked_run(5, status=None)


@needs_mlflow
def test_a_tracker_that_is_down_costs_the_tick_nothing_and_catches_up_with_each_step_once(
        store, tracked_run, start_daemon, tmp_path):
    port = free_port()  # nobody listens there yet
    clock = [T0 + 1000]
    run_id = launched(store, tracked_run)
    daemon = start_daemon({"mlflow": f"http://127.0.0.1:{port}", "timeout": 5.0},
                          clock=lambda: clock[0])
    wait_for(lambda: tracker_events(store, FAILED))

    for k in range(6, 46, 10):  # four ticks of ten steps, a minute apart
        daemon.launcher.lines[run_id] = step_lines(k, k + 9)
        clock[0] += 60
        started = time.monotonic()
        daemon.tick()
        assert time.monotonic() - started < 5.0  # never the request's timeout
        time.sleep(0.3)  # the worker's round after the poke: refused again

    assert store.step_counts(run_id) == {records.BASELINE: 45, records.MAIN: 45}
    assert len(tracker_events(store, FAILED)) == 1  # said once, not once a round
    server = MlflowServer(tmp_path / "mlflow", port).start()
    try:
        clock[0] += 600  # past any backoff
        daemon.tick()
        client = server.client()
        remote = wait_for(lambda: store.tracker_run(f"mlflow:{server.uri}", run_id)["remote"])
        wait_for(lambda: len(client.get_metric_history(remote, "train/loss")) >= 45)
        time.sleep(0.5)  # a point sent twice would land now
        steps = sorted(m.step for m in client.get_metric_history(remote, "train/loss"))
        baseline = sorted(m.step for m in client.get_metric_history(remote,
                                                                   "baseline/train/loss"))
        assert steps == baseline == list(range(1, 46))
        assert len(tracker_events(store, BACK)) == 1
    finally:
        daemon.close()
        server.stop()


def test_a_tracker_that_hangs_holds_up_no_tick(store, tracked_run, start_daemon):
    run_id = launched(store, tracked_run)
    with socket.socket() as hanging:  # takes connections and never answers them
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(8)
        timeout = 20.0
        daemon = start_daemon({"mlflow": f"http://127.0.0.1:{hanging.getsockname()[1]}",
                               "timeout": timeout})
        assert select.select([hanging], [], [], 10.0)[0]  # the worker waits on it now

        started = time.monotonic()
        for k in range(6, 56, 10):
            daemon.launcher.lines[run_id] = step_lines(k, k + 9)
            daemon.tick()
        took = time.monotonic() - started

    assert took < timeout  # five ticks, not one waited on the tracker
    assert store.step_counts(run_id) == {records.BASELINE: 55, records.MAIN: 55}


@needs_tensorboard
def test_a_restarted_daemon_goes_on_from_the_cursor(store, tracked_run, start_daemon, tmp_path):
    run_id = launched(store, tracked_run)
    folder = tmp_path / "tb" / f"run-{run_id}-chat"
    first = start_daemon({"tensorboard": str(tmp_path / "tb")})
    first.launcher.lines[run_id] = step_lines(6, 12)
    first.tick()
    wait_for(lambda: store.tracker_pass(f"tensorboard:{tmp_path / 'tb'}", run_id,
                                        records.MAIN)["step"] == 12)
    first.close()
    path = store.tracker_pass(f"tensorboard:{tmp_path / 'tb'}", run_id, records.MAIN)["file"]
    with open(path, "rb") as f:
        written = f.read()

    second = start_daemon({"tensorboard": str(tmp_path / "tb")})
    second.launcher.lines[run_id] = step_lines(13, 20)
    second.tick()
    wait_for(lambda: store.tracker_pass(f"tensorboard:{tmp_path / 'tb'}", run_id,
                                        records.MAIN)["step"] == 20)

    with open(path, "rb") as f:
        assert f.read().startswith(written)  # appended, not written again
    events = read_events(folder)
    assert [s for s, _ in events["train/loss"]] == list(range(1, 21))
    assert [s for s, _ in read_events(folder / "baseline")["train/loss"]] == list(range(1, 21))


@needs_tensorboard
def test_a_tracker_set_later_sends_the_running_run_whole_and_leaves_older_runs_to_export(
        store, tracked_run, tmp_path):
    older = tracked_run(4)  # ended at T0 + 500
    running = launched(store, tracked_run)
    worker = TrackerWorker([TensorBoard(tmp_path / "tb")], open_store=lambda: Store(store.path))

    sync_all(worker, store, T0 + 1000)

    assert [p.name for p in (tmp_path / "tb").iterdir()] == [f"run-{running}-chat"]
    events = read_events(tmp_path / "tb" / f"run-{running}-chat")
    assert [s for s, _ in events["train/loss"]] == list(range(1, 6))
    assert store.tracker_run(f"tensorboard:{tmp_path / 'tb'}", older)["ended"] is None


@needs_tensorboard
def test_a_run_refused_there_backs_off_alone_with_one_event(store, tracked_run, tmp_path):
    refused, sent = launched(store, tracked_run), tracked_run(5, status=None, name="other")
    foreign = tmp_path / "tb" / f"run-{refused}-chat"
    ownership.claim(foreign, ownership.Owner(str(refused), "another-home"))
    worker = TrackerWorker([TensorBoard(tmp_path / "tb")], open_store=lambda: Store(store.path))

    for k in range(5):  # five rounds past the run's backoff, within SAY_AGAIN_S
        sync_all(worker, store, T0 + 1000 + k * SAY_AGAIN_S / 5)

    [failed] = tracker_events(store, FAILED, refused)
    assert "holds the output of run" in failed["message"]
    assert [s for s, _ in read_events(tmp_path / "tb" / f"run-{sent}-other")["train/loss"]] \
        == list(range(1, 6))
    ownership.write_info(foreign, {"owner": ownership.Owner(str(refused), store.home_id)
                                   .as_dict(), "files": {}})
    sync_all(worker, store, T0 + 1000 + SAY_AGAIN_S)
    assert [s for s, _ in read_events(foreign)["train/loss"]] == list(range(1, 6))
    assert len(tracker_events(store, BACK, refused)) == 1


@needs_tensorboard
def test_a_daemon_that_stops_sends_what_is_left_first(store, tracked_run, start_daemon,
                                                      tmp_path):
    run_id = tracked_run(300)  # many rounds' worth, ended (at T0 + 500): its end goes last
    daemon = start_daemon({"tensorboard": str(tmp_path / "tb")}, clock=lambda: T0 + 100)

    daemon.trackers.close()

    events = read_events(tmp_path / "tb" / f"run-{run_id}-chat")
    assert [s for s, _ in events["train/loss"]] == list(range(1, 301))
    assert [s for s, _ in events["stepmodel/error"]] == [300]
