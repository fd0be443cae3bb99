from daemon.run.ingest import Ingest
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


# === hostile lines through the store: before the contract checked them, each one
# raised in feed(), the offset never moved and the queue stopped for good ===

HOSTILE = [
    '{"kind":"step","step":9223372036854775808,"loss":1,"step_s":1,"tokens":1,"lr":1}',
    '{"kind":"step","step":1,"loss":1,"step_s":1,"tokens":18446744073709551616,"lr":1}',
    '{"kind":"step","step":1e300,"loss":1,"step_s":1,"tokens":1,"lr":1}',
    '{"kind":"event","event":"x","message":"m","time":"nan"}',
    '{"kind":"end","status":"error","error":"e","time":"nan"}',
    '{"kind":"step","step":7,"loss":"nan","step_s":1,"tokens":1,"lr":1,"time":"nan"}',
    '{"kind":"step","step":8,"loss":1,"step_s":"nan","tokens":1,"lr":1}',
    '{"kind":"start","config":{}, "git": {"a": 1}}',
    '{"kind":"event","event":"e","data":' + "[" * 1000 + "]" * 1000 + "}",
]
SURROGATES = [
    '{"kind":"event","event":"e","message":"\\ud800"}',
    '{"kind":"event","event":"e","message":"ok","data":{"\\udc00":1}}',
    '{"kind":"step","config_label":"\\ud800","step":1,"loss":1,"step_s":1,"tokens":1,"lr":1}',
]


def test_every_hostile_line_is_counted_malformed_and_the_steps_around_it_are_stored(store):
    run = store.add_run({"cards": 1})
    for i, bad in enumerate(HOSTILE):
        fed = Ingest(store).feed(run, lines(step(2 * i + 1)) + [bad] + lines(step(2 * i + 2)))
        assert (fed.new_steps, fed.malformed) == (2, 1), bad
    assert [s["step"] for s in store.steps(run)] == list(range(1, 2 * len(HOSTILE) + 1))
    assert store.run(run)["malformed"] == len(HOSTILE)


def test_lone_surrogates_are_stored_as_replacement_characters(store):
    run = store.add_run({"cards": 1})
    fed = Ingest(store).feed(run, SURROGATES)
    assert (fed.new_steps, fed.malformed) == (1, 0)
    assert [s["config_label"] for s in store.steps(run, None)] == ["\ufffd"]
    assert [e["message"] for e in store.events(run_id=run)] == ["\ufffd", "ok"]


def test_a_start_record_without_config_label_opens_the_main_pass(store):
    run = store.add_run({"cards": 1})
    fed = Ingest(store).feed(run, ['{"kind":"start","config":{"cards":1}}'])
    assert fed.malformed == 0
    assert [p["config_label"] for p in store.passes(run)] == ["main"]


def test_the_store_refuses_a_step_it_cannot_keep_instead_of_dropping_it(store):
    import sqlite3

    import pytest

    run = store.add_run({"cards": 1})
    unkeepable = records.Step("main", 1, 1.0, float("nan"), 1, 1e-3)  # step_s NOT NULL
    with pytest.raises(sqlite3.IntegrityError):
        store.add_steps(run, [unkeepable])
    assert store.add_steps(run, [step(1)]) == 1
    assert store.add_steps(run, [step(1)]) == 0  # a step it has is still skipped quietly


def test_a_local_run_whose_log_holds_hostile_lines_is_read_to_the_end(home, store):
    from daemon.launchers.local import LocalLauncher

    run = store.add_run({"cards": 1})
    log = home.run_dir(run) / "output.log"
    body = lines(START, step(1)) + HOSTILE + SURROGATES + lines(step(2))
    log.write_text("\n".join(body) + "\n", encoding="utf-8", errors="surrogatepass")
    store.update_run(run, status="running", log_path=str(log))
    launcher = LocalLauncher(home=home, store=store, config=home.config(), ingest=Ingest(store))
    outcome = launcher.follow(store.run(run))
    assert store.run(run)["log_offset"] == log.stat().st_size
    assert [s["step"] for s in store.steps(run)] == [1, 2]
    assert store.run(run)["malformed"] == len(HOSTILE)
    assert outcome.status == "failed"  # no trainer and no end record: said, not hidden


def test_ingest_keeps_a_passs_plots_every_few_thousand_steps_and_readers_plot_every_step(store):
    from daemon.run import plots

    run = store.add_run({"cards": 1})
    ingest = Ingest(store)
    every = plots.KEEP_PLOTS_EVERY
    kept_at = []
    for first in range(1, 2 * every + 2, 500):  # batches of 500 steps, as a daemon tick reads
        ingest.feed(run, lines(*(step(n, loss=1.0 + (n % 7)) for n in range(first, first + 500))))
        kept_at.append(store.pass_state_steps(run, records.MAIN, "plots"))
        # Between keeps a reader's plots are the kept ones plus the steps since: every step.
        whole = plots.PassPlots()
        whole.read(store, run, records.MAIN)
        assert plots.pass_plots(store, run, records.MAIN).state() == whole.state()
    # Kept once enough steps were stored since the last keep, not after every batch.
    assert kept_at[:4] == [None, None, None, every]
    assert kept_at[-1] == 2 * every and len(set(kept_at)) == 3
