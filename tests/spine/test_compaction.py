"""Store compaction: old samples fold per minute, old gate checks into runs of verdicts,
and every reader gives the same answers over folded rows as over raw ones."""

from __future__ import annotations

import pytest

from daemon.stepmodel import stats
from daemon.store import compaction
from daemon.store.compaction import DAY, Compactor
from trainer import records

NOW = 1_800_000_000.0  # a minute boundary
OLD = NOW - 40 * DAY  # beyond the 30-day window
WINDOW = 30.0
HOLDER = {"pid": 4121, "user": "kim", "cmdline": "python bench.py",
          "files": ["/dev/rngd/npu0pe0-3"], "started": OLD - 100}


def gate(name, verdict, reading=None):
    return {"name": name, "reading": reading, "threshold": "x", "verdict": verdict,
            "detail": f"{name} {verdict}"}


def check(store, run_id, t, passed, load):
    gates = [gate("host_load", "pass" if passed else "fail", load),
             gate("device_idle", "pass" if passed else "fail", 0 if passed else 1)]
    store.add_gate_check(run_id, gates, passed, now=t)


def compact(store, now=NOW, batch=compaction.BATCH):
    before = now - WINDOW * DAY
    done = 0
    while True:
        n, more = store.compact_samples(before, batch)
        m, more_checks = store.compact_gate_checks(before, batch)
        done += n + m
        if not (more or more_checks):
            return done


# === samples =================================================================


def test_old_samples_fold_into_one_row_per_minute_with_min_max_mean_and_holders(store):
    run = store.add_run({"cards": 1, "resident": 0, "steps": 5})
    for i, load in enumerate([1.0, 2.0, 6.0, 3.0]):  # 4 samples in one minute, 15 s apart
        store.add_sample(load=(load, 1.0, 1.0), holders=[HOLDER] if i == 2 else [],
                         cards_free=2 - (i == 2), run_id=run, now=OLD + 15 * i)
    store.add_sample(load=(9.0, 1.0, 1.0), holders=[], now=OLD + 60)  # next minute, no run
    store.add_sample(load=(5.0, 1.0, 1.0), holders=[], now=NOW - 10)  # inside the window
    assert compact(store) == 5
    rows = store.samples()
    assert len(rows) == 3
    minute, next_minute, recent = rows
    assert (minute["time"], minute["run_id"], minute["n"]) == (OLD, run, 4)
    assert (minute["load1"], minute["load1_min"], minute["load1_max"]) == (3.0, 1.0, 6.0)
    assert minute["holders"] == [HOLDER] and minute["holder_count"] == 1
    assert minute["cards_free"] == 1
    assert (next_minute["n"], next_minute["run_id"], next_minute["load1"]) == (1, None, 9.0)
    assert recent["n"] is None and recent["load1"] == 5.0  # full resolution in the window


def test_steps_events_and_runs_are_never_compacted(store):
    run = store.add_run({"cards": 1, "resident": 0, "steps": 5}, now=OLD)
    store.add_pass(run, records.Start(records.MAIN, {"resident": 0}, time=OLD))
    for step in range(1, 6):
        store.add_steps(run, [records.Step(records.MAIN, step, 2.0, 0.1, 64, 1e-3, {},
                                           time=OLD + step)])
    store.add_event(run, "launch", "launched", now=OLD)
    for i in range(100):
        store.add_sample(load=(1.0, 1.0, 1.0), holders=[], run_id=run, now=OLD + 5 * i)
    before = store.table_rows()
    compact(store)
    after = store.table_rows()
    assert after["samples"] < before["samples"]
    for table in ("runs", "passes", "steps", "events"):
        assert after[table] == before[table], table


def test_a_run_load_range_and_export_read_the_same_over_folded_samples(store, home):
    from rngdctl import export

    run = store.add_run({"cards": 1, "resident": 0, "steps": 5, "model": "tiny-llama"},
                        now=OLD - 100)
    loads = [3.0 + (i * 7) % 11 for i in range(300)]  # 25 minutes of 5 s samples
    for i, load in enumerate(loads):
        store.add_sample(load=(load, 1.0, 1.0), holders=[], run_id=run, now=OLD + 5 * i)
    raw = stats.load_range(store.samples(run_id=run))
    report = export.collect(store, run)
    compact(store)
    assert len(store.samples(run_id=run)) == 25
    assert stats.load_range(store.samples(run_id=run)) == raw == (min(loads), max(loads))
    assert export.collect(store, run).host_load == report.host_load


# === gate checks =============================================================


def test_gate_checks_fold_into_runs_of_identical_verdicts_with_their_load_range(store):
    run = store.add_run({"cards": 1, "resident": 0, "steps": 5})
    pattern = [(False, 160.0), (False, 170.0), (False, 155.0), (True, 20.0), (True, 30.0),
               (False, 151.0)]
    for i, (passed, load) in enumerate(pattern):
        check(store, run, OLD + 5 * i, passed, load)
    assert compact(store) == 6
    rows = store.gate_checks(run_id=run)
    assert [(r["passed"], r["count"]) for r in rows] == [(0, 3), (1, 2), (0, 1)]
    first = rows[0]
    assert (first["time"], first["last_time"]) == (OLD, OLD + 10)
    assert (first["load_min"], first["load_max"]) == (155.0, 170.0)


def test_readers_answer_the_same_over_folded_gate_checks(store):
    from rngdctl import export

    run = store.add_run({"cards": 1, "resident": 0, "steps": 5, "model": "tiny-llama"},
                        now=OLD - 100)
    for i in range(200):
        passed = 80 <= i < 90 or i >= 190
        check(store, run, OLD + 5 * i, passed, 20.0 + i % 13 if passed else 150.0 + i % 17)
    raw = store.gate_checks(run_id=run)
    summary, since = export.summarize_gates(raw), store.blocked_since(run)
    compact(store)
    folded = store.gate_checks(run_id=run)
    assert len(folded) == 4
    assert stats.gate_load_range(folded) == stats.gate_load_range(raw)
    assert export.summarize_gates(folded) == summary
    assert store.blocked_since(run) == since
    assert store.gate_checks(run_id=run, limit=1)[0]["last_time"] == raw[-1]["time"]


def test_the_tui_gates_panel_reads_a_run_that_waited_past_the_window(store, home):
    from rngdctl.tui.data import ViewSource

    run = store.add_run({"cards": 1, "resident": 0, "steps": 5}, now=OLD - 100)
    for i in range(120):  # ten minutes blocked, all older than the window
        check(store, run, OLD + 5 * i, False, 160.0)
    view = ViewSource(store, home=home.path, clock=lambda: NOW).build().gates
    compact(store)
    folded = ViewSource(store, home=home.path, clock=lambda: NOW).build().gates
    assert len(store.gate_checks(run_id=run)) == 1
    assert (folded.checked_at, folded.blocked_for, folded.rows) == (
        view.checked_at, view.blocked_for, view.rows)


# === batches and the daemon's schedule =======================================


def test_small_batches_give_the_same_rows_as_one_big_one(home, tmp_path):
    from daemon.home import Home

    def fill(store):
        run = store.add_run({"cards": 1, "resident": 0, "steps": 5})
        for i in range(500):
            store.add_sample(load=(float(i % 9), 1.0, 1.0), holders=[], now=OLD + 7 * i)
            check(store, run, OLD + 5 * i, (i // 40) % 2 == 0, float(i % 200))

    def content(store):
        return ([{k: r[k] for k in ("time", "n", "load1", "load1_min", "load1_max")}
                 for r in store.samples()],
                [{k: r[k] for k in ("time", "last_time", "count", "load_min", "load_max")}
                 for r in store.gate_checks()])

    with home.store() as one:
        fill(one)
        compact(one)
        expected = content(one)
    with Home(tmp_path / "other").ensure().store() as batched:
        fill(batched)
        compact(batched, batch=37)
        assert content(batched) == expected


def test_the_daemon_compacts_at_most_once_per_interval(store):
    compactor = Compactor(store, full_resolution_days=WINDOW, every=3600.0)
    store.add_sample(load=(1.0, 1.0, 1.0), holders=[], now=OLD)
    assert compactor.maybe_run(NOW) == 1
    store.add_sample(load=(1.0, 1.0, 1.0), holders=[], now=OLD + 120)
    assert compactor.maybe_run(NOW + 5) is None  # not yet: a tick costs a comparison
    assert [r["n"] for r in store.samples()] == [1, None]
    assert compactor.maybe_run(NOW + 3600) == 1
    assert [r["n"] for r in store.samples()] == [1, 1]


def test_a_backlog_brings_the_next_compaction_forward(store):
    compactor = Compactor(store, full_resolution_days=WINDOW, every=3600.0, batch=50)
    for i in range(200):
        store.add_sample(load=(1.0, 1.0, 1.0), holders=[], now=OLD + 5 * i)
    compactor.maybe_run(NOW)
    assert compactor.next_time == NOW + compaction.BACKLOG_EVERY


def test_the_daemon_tick_compacts_with_the_configured_window(home, store):
    from daemon.probes.host_reading import HostReading
    from daemon.scheduling.loop import Daemon
    from tests.spine.test_scheduler import ScriptedLauncher

    config = home.config()
    config.daemon.full_resolution_days = 10.0
    d = Daemon(home, store, config, ScriptedLauncher(),
               probe=lambda: HostReading(0.0, (1.0, 1.0, 1.0), (), True))
    store.add_sample(load=(1.0, 1.0, 1.0), holders=[], now=NOW - 11 * DAY)
    store.add_sample(load=(1.0, 1.0, 1.0), holders=[], now=NOW - 9 * DAY)
    d.tick(now=NOW)
    assert [r["n"] for r in store.samples()] == [1, None, None]  # folded, kept, this tick's


@pytest.mark.parametrize("text", ["[daemon]\nfull_resolution_days = -1\n",
                                  "[daemon]\ncompact_every = 0\n"])
def test_a_bad_compaction_setting_is_a_config_error(text):
    from daemon.errors import ConfigError
    from daemon.home import parse_config

    with pytest.raises(ConfigError):
        parse_config(text)
