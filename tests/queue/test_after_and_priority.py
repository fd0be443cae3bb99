"""--after RUN (Slurm's afterok) and --priority N: who is the head of the queue, and why not."""

from __future__ import annotations

import json
import sqlite3

from daemon import store as store_mod
from daemon.launchers.base import Outcome
from daemon.store import Store

CONFIG = {"cards": 1, "resident": 0, "steps": 5}


def test_a_run_waits_for_its_after_run_to_be_done_before_it_launches(daemon, store):
    first = store.add_run(CONFIG)
    second = store.add_run(CONFIG, after=first)
    third = store.add_run(CONFIG)

    assert daemon.tick(now=1.0).launched == first
    daemon.launcher.outcomes[first] = Outcome("done")
    assert daemon.tick(now=2.0).launched == second
    daemon.launcher.outcomes[second] = Outcome("done")
    assert daemon.tick(now=3.0).launched == third


def test_a_waiting_run_does_not_hold_up_the_runs_behind_it(daemon, store):
    held = store.add_run(CONFIG)
    store.set_held(held, True)
    waiting = store.add_run(CONFIG, after=held)
    free = store.add_run(CONFIG)

    assert store.head_of_queue()["id"] == free
    assert daemon.tick(now=1.0).launched == free
    assert store.run(waiting)["status"] == "queued"


def test_when_the_after_run_fails_the_waiting_runs_are_cancelled_with_the_reason(daemon, store):
    first = store.add_run(CONFIG)
    second = store.add_run(CONFIG, after=first)
    third = store.add_run(CONFIG, after=second)
    daemon.tick(now=1.0)
    daemon.launcher.outcomes[first] = Outcome("failed", "exit 1: no data\nmore")

    result = daemon.tick(now=2.0)

    assert result.launched is None and result.idle
    assert store.run(second)["status"] == "cancelled"
    assert store.run(second)["exit_reason"] == (
        f"run {first}, which this run waits for (--after), ended failed: exit 1: no data")
    assert store.run(third)["exit_reason"].startswith(
        f"run {second}, which this run waits for (--after), ended cancelled")
    [event] = store.events(run_id=second, kinds=["dependency"])
    assert event["data"] == {"after": first}


def test_a_cancelled_after_run_cancels_its_dependent_too(daemon, store):
    first = store.add_run(CONFIG)
    second = store.add_run(CONFIG, after=first)
    store.request_cancel(first)

    daemon.tick(now=1.0)

    assert store.run(second)["status"] == "cancelled"
    assert "ended cancelled: cancelled while queued" in store.run(second)["exit_reason"]


def test_a_higher_priority_launches_first_and_equal_priorities_keep_queue_order(daemon, store):
    low = store.add_run(CONFIG)
    high = store.add_run(CONFIG, priority=5)
    also_high = store.add_run(CONFIG, priority=5)

    assert [r["id"] for r in store.queue()] == [high, also_high, low]
    assert daemon.tick(now=1.0).launched == high


def test_move_still_reorders_runs_of_the_same_priority(store):
    a, b = store.add_run(CONFIG, priority=1), store.add_run(CONFIG, priority=1)
    c = store.add_run(CONFIG)

    store.move(b, -1)

    assert [r["id"] for r in store.queue()] == [b, a, c]


def test_a_version_3_store_gains_dependencies_priorities_and_estimates(tmp_path):
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path)
    for version in (1, 2, 3):
        for statement in store_mod.MIGRATIONS[version]:
            conn.execute(statement)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '3')")
    conn.execute("INSERT INTO runs (status, config, position, created) "
                 "VALUES ('queued', '{\"cards\": 1}', 1, 0)")
    conn.commit()
    conn.close()

    with Store(path) as s:
        assert s.schema_version() == store_mod.SCHEMA_VERSION
        run = s.run(1)
        assert (run["after_run"], run["priority"]) == (None, 0)
        assert s.head_of_queue()["id"] == 1
        assert s.conn.execute("SELECT COUNT(*) FROM estimates").fetchone() == (0,)


# === the CLI =================================================================


def test_submit_after_and_priority_are_stored_and_shown(cli, store):
    first = json.loads(cli("submit", "--cards", "1", "--resident", "0", "--json").output)["id"]
    result = cli("submit", "--cards", "1", "--resident", "0", "--after", str(first),
                 "--priority", "3", "--json")

    data = json.loads(result.output)
    assert (data["after_run"], data["priority"], data["position"]) == (first, 3, 1)
    assert "after" not in data["config"] and "priority" not in data["config"]
    shown = cli("show", str(data["id"])).output
    assert f"waits for run {first} (queued) to be done (--after)" in shown
    assert "priority 3" in shown


def test_submit_after_a_run_that_already_failed_is_refused_in_one_line(rngdctl, store):
    dead = store.add_run(CONFIG)
    store.finish_run(dead, "failed", reason="boom")

    code, out, err = rngdctl("submit", "--cards", "1", "--resident", "0", "--after", str(dead))

    assert (code, out) == (2, "")
    assert err == (f"Error: --after {dead}: run {dead} already ended failed, so this run could "
                   "never start\n")
    assert len(store.runs()) == 1


def test_submit_after_an_unknown_run_is_refused_in_one_line(rngdctl):
    code, out, err = rngdctl("submit", "--cards", "1", "--resident", "0", "--after", "nope")
    assert (code, out, err) == (2, "", "Error: no run 'nope'\n")


def test_move_says_when_higher_priority_runs_stay_ahead(cli, store):
    high = store.add_run(CONFIG, priority=2)
    low = store.add_run(CONFIG)

    result = cli("move", str(low), "1")

    assert result.output == (f"run {low} is now at position 2 (1 run of higher priority ahead: "
                             "see --priority)\n")
    assert store.queue()[0]["id"] == high
