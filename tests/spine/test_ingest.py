from daemon.ingest import Ingest
from trainer import records


def lines(*recs):
    return [records.dumps(r) for r in recs]


START = records.Start("main", {"cards": 1, "steps": 2}, versions={"torch": "2.13.0"},
                      git="abc123", host="node-1", time=1.0)


def step(n, loss=2.0):
    return records.Step("main", n, loss, 0.5, 128, 1e-3, time=float(n))


def test_feeding_the_same_lines_twice_stores_each_step_and_event_once(store):
    run = store.add_run({"cards": 1})
    feed = lines(START, step(1), records.Event("compile", "head 94 s", time=1.5), step(2))
    ingest = Ingest(store)
    assert ingest.feed(run, feed).new_steps == 2
    assert ingest.feed(run, feed).new_steps == 0
    assert len(store.steps(run)) == 2
    assert [e["kind"] for e in store.events(run_id=run)] == ["compile"]


def test_the_start_record_gives_the_run_its_versions_and_pass(store):
    run = store.add_run({"cards": 1})
    Ingest(store).feed(run, lines(START))
    assert store.run(run)["git"] == "abc123"
    assert store.run(run)["versions"] == {"torch": "2.13.0"}
    assert store.passes(run)[0]["config"] == {"cards": 1, "steps": 2}


def test_log_lines_pass_through_and_malformed_records_are_counted(store):
    run = store.add_run({"cards": 1})
    fed = Ingest(store).feed(run, ["loading tokenizer", '{"kind": "step", "step": "x"}'])
    assert fed.log_lines == ["loading tokenizer"]
    assert fed.malformed == 1
    assert store.run(run)["malformed"] == 1
    assert store.events(run_id=run)[0]["kind"] == "malformed"


def test_a_nonfinite_loss_is_stored_and_flagged(store):
    run = store.add_run({"cards": 1})
    Ingest(store).feed(run, lines(step(1, float("nan"))))
    assert store.steps(run)[0]["loss_flag"] == "nan"
    assert "loss is nan" in store.events(run_id=run)[0]["message"]


def test_the_end_record_is_returned_and_kept(store):
    run = store.add_run({"cards": 1})
    fed = Ingest(store).feed(run, lines(records.End("oom", "layer 3 upload", time=9.0)))
    assert fed.end.status == "oom"
    assert store.events(run_id=run, kinds=["end"])[0]["data"]["status"] == "oom"
