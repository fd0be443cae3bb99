"""`rngdctl restart [RUN]... [--all-failed]`: pueue's restart, as new runs."""

from __future__ import annotations

import json

from daemon.scheduling.queueing import restart_runs

CONFIG = {"cards": 1, "resident": 0, "steps": 5}


def test_all_failed_queues_a_new_run_for_each_failed_oom_and_timed_out_run(store):
    failed, oom, timeout = (store.add_run({**CONFIG, "seed": i}) for i in range(3))
    done, cancelled = store.add_run(CONFIG), store.add_run(CONFIG)
    for run, status in ((failed, "failed"), (oom, "oom"), (timeout, "timeout"), (done, "done")):
        store.finish_run(run, status, reason=f"{status}\ntail")
    store.request_cancel(cancelled)

    pairs = restart_runs(store, [], all_failed=True)

    assert [old for old, _ in pairs] == [failed, oom, timeout]
    for old, new in pairs:
        assert store.run(new)["status"] == "queued"
        assert store.run(new)["config"] == store.run(old)["config"]
        assert store.run(new)["restart_of"] == old
        assert store.run(old)["status"] != "queued"  # the old run and its record stay
    [event] = store.events(run_id=pairs[1][1], kinds=["restart"])
    assert event["message"] == f"restarted from run {oom} (oom: oom)"
    assert event["data"] == {"from": oom, "after": None}


def test_all_failed_twice_restarts_each_failure_once(store):
    run = store.add_run(CONFIG)
    store.finish_run(run, "failed")

    assert len(restart_runs(store, [], all_failed=True)) == 1
    assert restart_runs(store, [], all_failed=True) == []


def test_a_dependent_cancelled_by_a_failure_is_restarted_behind_the_restart_of_its_run(
        store):
    first = store.add_run(CONFIG)
    second = store.add_run(CONFIG, after=first)
    store.finish_run(first, "failed", reason="exit code 1")
    store.cancel_broken_dependents()

    pairs = dict(restart_runs(store, [], all_failed=True))

    assert set(pairs) == {first, second}
    assert store.run(pairs[second])["after_run"] == pairs[first]
    assert store.head_of_queue()["id"] == pairs[first]


def test_the_restart_copies_priority_and_notifier_and_numbers_the_name(store):
    run = store.add_run(CONFIG, name="r200", priority=3, notify="notify-send {id}")
    store.finish_run(run, "done")

    [(_, new)] = restart_runs(store, [run])

    restarted = store.run(new)
    assert (restarted["name"], restarted["priority"], restarted["notify"]) == (
        "r200-2", 3, "notify-send {id}")  # a name is one run's: `show r200` is the first


def test_a_restart_behind_a_failed_run_not_restarted_waits_for_nothing_and_says_so(store):
    first = store.add_run(CONFIG)
    second = store.add_run(CONFIG, after=first)
    store.finish_run(first, "failed")
    store.cancel_broken_dependents()

    [(_, new)] = restart_runs(store, [second])

    assert store.run(new)["after_run"] is None
    [event] = store.events(run_id=new, kinds=["restart"])
    assert event["message"].endswith(f"; not after run {first}, which ended failed")


def test_restart_prints_old_and_new_and_json_lists_them(cli, store):
    run = store.add_run(CONFIG)
    store.finish_run(run, "timeout")

    result = cli("restart", "--all-failed")
    again = cli("restart", "--all-failed", "--json")

    assert result.exit_code == 0
    new = store.restarts_of(run)[0]
    assert result.output == f"run {run} -> run {new} (queued)\n"
    assert again.exit_code == 0 and json.loads(again.output) == []


def test_restart_of_a_run_that_has_not_ended_is_one_line_and_exit_2(rngdctl, store):
    run = store.add_run(CONFIG)

    result = rngdctl("restart", str(run))

    assert result == (2, "", (f"Error: run {run} is queued: only an ended run can be "
                              "restarted\n"))
    assert len(store.runs()) == 1


def test_restart_without_runs_or_all_failed_is_exit_2(rngdctl, store):
    nothing = rngdctl("restart")
    unknown = rngdctl("restart", "999")

    assert nothing == (2, "", "Error: give the runs to restart, or --all-failed\n")
    assert unknown == (2, "", "Error: no run '999'\n")
