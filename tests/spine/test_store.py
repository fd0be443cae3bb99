import math
import os
import sqlite3
import stat

import pytest

from daemon import store as store_mod
from daemon.errors import NoSuchRun, StoreVersionError
from daemon.store import Store
from trainer import records

CONFIG = {"cards": 1, "resident": 2, "steps": 10, "model": "tiny-llama"}


def steps(*numbers, label="main", loss=2.0):
    return [records.Step(label, n, loss, 0.5, 128, 1e-3, {"fwd_bwd": 0.5}, time=float(n))
            for n in numbers]


def test_the_database_is_private_and_in_wal_mode(store):
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_steps_fed_twice_are_stored_once(store):
    run = store.add_run(CONFIG)
    assert store.add_steps(run, steps(1, 2, 3)) == 3
    assert store.add_steps(run, steps(2, 3, 4)) == 1
    assert [s["step"] for s in store.steps(run)] == [1, 2, 3, 4]


def test_the_same_step_number_in_two_passes_is_two_steps(store):
    run = store.add_run(CONFIG)
    store.add_steps(run, steps(1, 2, label="baseline") + steps(1, 2))
    assert store.step_counts(run) == {"baseline": 2, "main": 2}


def test_a_nan_loss_is_stored_as_nan_not_null(store):
    run = store.add_run(CONFIG)
    store.add_steps(run, steps(1, loss=float("nan")) + steps(2, loss=float("-inf")))
    losses = [s["loss"] for s in store.steps(run)]
    assert math.isnan(losses[0]) and losses[1] == -math.inf


def test_queue_order_follows_moves_and_skips_held_runs(store):
    a, b, c = (store.add_run(CONFIG) for _ in range(3))
    store.move(c, -2)
    assert [r["id"] for r in store.queue()] == [c, a, b]
    store.set_held(c, True)
    assert store.head_of_queue()["id"] == a


def test_only_one_run_can_be_claimed_for_launch(store):
    a, b = store.add_run(CONFIG), store.add_run(CONFIG)
    assert store.claim_for_launch(a, launcher="local")
    assert not store.claim_for_launch(b, launcher="local")
    assert store.run(a)["attempts"] == 1


def test_cancel_ends_a_queued_run_and_flags_an_active_one(store):
    queued, active = store.add_run(CONFIG), store.add_run(CONFIG)
    store.move(active, -1)
    store.claim_for_launch(active, launcher="local")
    assert store.request_cancel(queued) == "cancelled"
    assert store.run(queued)["status"] == "cancelled"
    assert store.request_cancel(active) == "requested"
    assert store.run(active)["cancel_requested"] == 1


def test_a_run_is_found_by_name(store):
    store.add_run(CONFIG, name="r200")
    assert store.run("r200")["name"] == "r200"
    with pytest.raises(NoSuchRun):
        store.run("nope")


def test_an_older_file_is_migrated_and_keeps_its_runs(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for statement in store_mod.MIGRATIONS[1]:
        conn.execute(statement)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO runs (status, config, position, created) "
                 "VALUES ('done', '{\"cards\": 1}', 1, 0)")
    conn.commit()
    conn.close()
    with Store(path) as s:
        assert s.schema_version() == store_mod.SCHEMA_VERSION
        assert s.run(1)["config"] == {"cards": 1}
        assert s.run(1)["job_name"] is None  # a column that version 2 added


def test_a_file_from_a_newer_rngdctl_is_refused(tmp_path):
    path = tmp_path / "new.db"
    with Store(path) as s:
        s.conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreVersionError, match="schema version 99"):
        Store(path)
