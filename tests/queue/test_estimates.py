"""Estimated start and end of queued runs, what they rest on, and their error once run."""

from __future__ import annotations

import json

import pytest

from daemon import stepmodel
from daemon.run.spec import validate
from daemon.scheduling.estimate import queue_estimates, record_estimates
from tests.queue.conftest import finished_baseline
from trainer import records


def _queued(store, **options):
    return store.add_run(validate({"cards": 1, "resident": 0, "steps": 100, "seq_len": 64,
                                   "accum": 2, **options}))


def test_queued_runs_start_one_after_another_by_their_predicted_durations(store):
    base = finished_baseline(store)
    a, b = _queued(store, steps=100), _queued(store, steps=300)
    step = stepmodel.model_config(store, base, cards=1, resident=0).prediction.step_s

    ea, eb = queue_estimates(store, now=1000.0)

    assert (ea.run_id, ea.position, eb.run_id, eb.position) == (a, 1, b, 2)
    assert ea.start == 1000.0
    assert ea.end == pytest.approx(1000.0 + 5.0 + 100 * step)
    assert eb.start == ea.end and eb.end == pytest.approx(eb.start + 5.0 + 300 * step)
    assert f"300 steps x {step * 1e3:.1f} ms (model, run {base} main)" in eb.basis
    assert "+5.0 s start-up (median of the last 1 done runs)" in eb.basis


def test_a_run_with_no_baseline_for_its_model_gets_no_estimate_nor_do_the_runs_behind(store):
    finished_baseline(store)
    first = _queued(store)
    odd = _queued(store, model="tiny-qwen2")
    behind = _queued(store)

    est = {e.run_id: e for e in queue_estimates(store, now=1000.0)}

    assert est[first].start is not None
    assert est[odd].start is None and "no baseline for model 'tiny-qwen2'" in est[odd].basis
    assert est[behind].start is None and "a run ahead has none" in est[behind].basis


def test_the_active_runs_steps_left_at_its_measured_median_come_first(store):
    finished_baseline(store)
    active = _queued(store, steps=50)
    store.update_run(active, status="running", started=900.0)
    store.add_steps(active, [records.Step(config_label="main", step=k, loss=4.0, step_s=0.5,
                                          tokens=128, lr=1e-5, phases={}, time=float(k))
                             for k in range(1, 11)])
    waiting = _queued(store)

    [e] = queue_estimates(store, now=1000.0)

    assert e.run_id == waiting and e.start == pytest.approx(1000.0 + 40 * 0.5)
    assert f"run {active} (active): 40 steps left x 500.0 ms measured" in e.basis


def test_the_first_estimate_is_stored_and_its_error_once_the_run_ends(store):
    finished_baseline(store)
    run = _queued(store)
    assert record_estimates(store, now=1000.0) == 1
    assert record_estimates(store, now=2000.0) == 0  # the first one is kept
    stored = store.estimate(run)

    store.update_run(run, status="running", started=1010.0)
    store.finish_run(run, "done", now=1050.0)

    settled = store.estimate(run)
    assert settled["made"] == 1000.0
    assert settled["start_error"] == pytest.approx(stored["start"] - 1010.0)
    assert settled["end_error"] == pytest.approx(stored["end"] - 1050.0)


def test_the_daemon_records_estimates_as_it_ticks(daemon, store):
    finished_baseline(store)
    store.add_run(validate({"cards": 1, "resident": 0, "steps": 5}), name="x")
    held = _queued(store)
    store.set_held(held, True)

    daemon.tick(now=1000.0)

    assert store.estimate(held) is None  # held: no estimate
    assert len(store.estimates()) == 1


def test_runs_and_show_give_position_estimate_and_basis(cli, store):
    finished_baseline(store)
    run = _queued(store)

    listed = [r for r in json.loads(cli("runs", "--json").output) if r["id"] == run]
    shown = cli("show", str(run)).output

    assert listed[0]["estimate"]["position"] == 1 and listed[0]["estimate"]["start"] is not None
    assert "queue: #1, start ~" in shown and "rests on: " in shown
    assert "no estimate" not in cli("runs").output


def test_a_median_the_caller_already_keeps_stands_for_the_active_runs_own(store):
    # The TUI keeps the active run's running median; the estimate then reads no steps for it.
    finished_baseline(store)
    active = _queued(store, steps=50)
    store.update_run(active, status="running", started=900.0)
    store.add_steps(active, [records.Step(config_label="main", step=k, loss=4.0, step_s=0.5,
                                          tokens=128, lr=1e-5, phases={}, time=float(k))
                             for k in range(1, 11)])
    _queued(store)

    [e] = queue_estimates(store, now=1000.0, medians={active: 0.25})

    assert e.start == pytest.approx(1000.0 + 40 * 0.25)
    assert "40 steps left x 250.0 ms measured" in e.basis


def test_a_queue_that_cannot_be_estimated_is_not_walked_again_until_something_changes(store):
    from daemon.scheduling.estimate import EstimateRecorder

    run = _queued(store)  # no baseline for its model yet: no estimate
    recorder = EstimateRecorder()
    assert recorder.record(store, now=1000.0) == 0
    assert recorder.record(store, now=1005.0) == 0
    assert recorder.walks == 1  # nothing changed: the second tick did not walk the queue

    finished_baseline(store)  # a baseline run finishes: now it can be estimated
    assert recorder.record(store, now=1010.0) == 1
    assert store.estimate(run)["made"] == 1010.0
    assert recorder.record(store, now=1015.0) == 0 and recorder.walks == 2  # none left


def test_a_held_run_gets_its_estimate_on_the_tick_after_it_is_released(store):
    from daemon.scheduling.estimate import EstimateRecorder

    finished_baseline(store)
    run = _queued(store)
    store.set_held(run, True)
    recorder = EstimateRecorder()
    recorder.record(store, now=1000.0)
    recorder.record(store, now=1005.0)
    assert store.estimate(run) is None and recorder.walks == 1

    store.set_held(run, False)
    assert recorder.record(store, now=1010.0) == 1
    assert store.estimate(run)["made"] == 1010.0


def test_an_edited_config_is_estimated_again(store):
    from daemon.scheduling.estimate import EstimateRecorder
    from daemon.scheduling.queueing import edit_run

    finished_baseline(store)
    run = _queued(store, model="tiny-qwen2")  # no baseline for this model
    recorder = EstimateRecorder()
    recorder.record(store, now=1000.0)
    recorder.record(store, now=1005.0)
    assert store.estimate(run) is None and recorder.walks == 1

    edit_run(store, run, ["model=tiny-llama"])
    assert recorder.record(store, now=1010.0) == 1


def test_a_running_daemon_keeps_its_start_up_heap_out_of_the_cyclic_collector(daemon):
    import gc

    assert gc.get_freeze_count() > 0  # the fixture started it
    daemon.close()
    assert gc.get_freeze_count() == 0
