"""The held-out loss and the output events through the real ingest into the store (issue 26)."""

import math

from daemon.run.ingest import Ingest
from trainer import records


def lines(*recs):
    return [records.dumps(r) for r in recs]


def held_out(step, loss=2.5, t=None):
    return records.Eval(records.MAIN, step, loss, tokens=4096, examples=64, seconds=0.8,
                        time=float(step) if t is None else t)


def step(n, loss=3.0):
    return records.Step(records.MAIN, n, loss, 0.5, 128, 1e-3, time=float(n))


def test_an_eval_record_is_stored_once_however_often_it_is_fed(store):
    run = store.add_run({"cards": 1})
    feed = lines(step(1), held_out(0, 3.1), held_out(1, 2.9))
    ingest = Ingest(store)
    assert ingest.feed(run, feed).new_evals == 2
    assert ingest.feed(run, feed).new_evals == 0
    assert [(e["step"], e["loss"]) for e in store.evals(run)] == [(0, 3.1), (1, 2.9)]
    assert store.evals(run)[1]["perplexity"] == math.exp(2.9)


def test_an_eval_is_a_record_not_a_malformed_line_nor_a_log_line(store):
    run = store.add_run({"cards": 1})
    fed = Ingest(store).feed(run, lines(held_out(0)))
    assert (fed.malformed, fed.log_lines) == (0, [])
    assert store.run(run)["malformed"] == 0


def test_a_resumed_trainer_writing_an_eval_again_keeps_the_first_copy(store):
    run = store.add_run({"cards": 1})
    ingest = Ingest(store)
    ingest.feed(run, lines(held_out(50, 2.40, t=100.0)))
    fed = ingest.feed(run, lines(held_out(50, 2.41, t=300.0), held_out(100, 2.2, t=400.0)))
    assert fed.new_evals == 1
    assert [(e["step"], e["loss"], e["time"]) for e in store.evals(run)] == [
        (50, 2.40, 100.0), (100, 2.2, 400.0)]


def test_a_nonfinite_held_out_loss_comes_back_as_it_was_written(store):
    run = store.add_run({"cards": 1})
    Ingest(store).feed(run, lines(held_out(1, float("nan")), held_out(2, float("inf")),
                                  held_out(3, 800.0)))
    nan, inf, huge = store.evals(run)
    assert math.isnan(nan["loss"]) and math.isnan(nan["perplexity"])
    assert inf["loss"] == math.inf and inf["perplexity"] == math.inf
    assert huge["loss"] == 800.0 and huge["perplexity"] == math.inf  # exp overflows
    (_, light_nan), *rest = store.eval_series(run)
    assert math.isnan(light_nan) and rest == [(2, math.inf), (3, 800.0)]


def test_the_lowest_held_out_loss_leaves_out_the_non_finite_ones(store):
    run = store.add_run({"cards": 1})
    Ingest(store).feed(run, lines(held_out(0, 3.0), held_out(10, float("nan")),
                                  held_out(20, 2.1), held_out(30, 2.3)))
    assert store.best_eval(run)["step"] == 20


def test_the_light_read_gives_only_the_evals_after_the_newest_one_read(store):
    run = store.add_run({"cards": 1})
    Ingest(store).feed(run, lines(held_out(0, 3.0), held_out(10, 2.5), held_out(20, 2.1)))
    assert store.eval_series(run) == [(0, 3.0), (10, 2.5), (20, 2.1)]
    assert store.eval_series(run, after_step=10) == [(20, 2.1)]


def test_checkpoint_resume_and_saved_events_are_kept_with_their_data(store):
    run = store.add_run({"cards": 1})
    Ingest(store).feed(run, lines(
        records.Event(records.CHECKPOINT, "step 50", data={"path": "/o/checkpoints/step-50",
                                                           "step": 50}, time=10.0),
        records.Event(records.RESUME, "from step 50", data={"path": "/o/checkpoints/step-50",
                                                            "step": 50}, time=20.0),
        records.Event(records.SAVED, "model saved", data={"path": "/o", "format": "full"},
                      time=30.0)))
    kept = store.events(run_id=run)
    assert [(e["kind"], e["data"]["path"]) for e in kept] == [
        ("checkpoint", "/o/checkpoints/step-50"), ("resume", "/o/checkpoints/step-50"),
        ("saved", "/o")]
