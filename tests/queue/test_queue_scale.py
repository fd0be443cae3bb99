"""The queue at scale (issue 33): `runs`, `runs --json`, `show`, `plan`, the TUI's refresh and
a daemon tick read the store as often for a sweep of 1,000 queued runs as for 10.

Each estimate of a queued run looked for its model's baseline by reading every run in the
store, so `runs` was quadratic in the queue (5.8 s at 400 queued runs, more than 600 s at
10,000). Here every statement the store runs is counted (sqlite3's trace callback on each
connection opened); bench/queue_scale.py times the same commands at 1,000 and 10,000.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from daemon.home import Home
from daemon.run.spec import validate
from daemon.scheduling.estimate import AHEAD_NAMED, queue_estimates
from daemon.store.connection import Connection
from tests.queue.conftest import ScriptedLauncher, finished_baseline

SIZES = (10, 1000)


def sweep_home(path, queued: int) -> Home:
    """A finished tiny-llama baseline and a sweep of ``queued`` runs (one in fifty held)."""
    home = Home(path).ensure()
    with home.store() as store:
        finished_baseline(store)
        for i in range(queued):
            run = store.add_run(validate({
                "cards": 1 + i % 2, "resident": i % 3, "steps": 100 + i, "seq_len": 64,
                "accum": 2, "lr": 1e-5 * (1 + i % 4), "baseline": i % 5 == 0}),
                name=f"sweep-{i}")
            if i % 50 == 7:
                store.set_held(run, True)
    return home


def statements(action, *stores) -> list[str]:
    """The SQL statements ``action()`` runs: on ``stores``, and on every store it opens."""
    seen: list[str] = []
    opened = Connection.__init__

    def counting(self, *args, **kwargs):
        opened(self, *args, **kwargs)
        self.conn.set_trace_callback(seen.append)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Connection, "__init__", counting)
        for store in stores:
            store.conn.set_trace_callback(seen.append)
        try:
            action()
        finally:
            for store in stores:
                store.conn.set_trace_callback(None)
    return seen


@pytest.fixture(scope="module")
def homes(tmp_path_factory):
    """Queues of 10 and of 1,000 runs, read (never written) by the tests that share them."""
    return {n: sweep_home(tmp_path_factory.mktemp(f"queue-{n}") / "home", n) for n in SIZES}


def cli_statements(home: Home, *args: str) -> int:
    from rngdctl.cli import cli

    results = []
    seen = statements(lambda: results.append(
        CliRunner().invoke(cli, ["--home", str(home.path), *args])))
    assert results[0].exit_code == 0, results[0].output
    return len(seen)


@pytest.mark.parametrize("command", [["runs"], ["runs", "--json"], ["runs", "--all"],
                                     ["show", "LAST"],
                                     ["plan", "--model", "tiny-llama", "--steps", "500"]])
def test_a_command_reads_the_store_as_often_for_a_thousand_queued_runs_as_for_ten(homes,
                                                                                command):
    # The newest run, the back of the queue: its estimate walks the whole queue.
    counts = {n: cli_statements(home, *[str(n + 1) if a == "LAST" else a for a in command])
              for n, home in homes.items()}

    if command == ["runs", "--all"]:
        # Every run listed: one more step-count read per 500 runs (SQLite's parameter limit).
        assert counts[1000] - counts[10] <= 1000 // 500
    else:
        assert counts[1000] == counts[10]


def test_a_tui_refresh_reads_the_store_as_often_for_a_thousand_queued_runs_as_for_ten(homes):
    from rngdctl.tui.data import ViewSource

    counts = {}
    for n, home in homes.items():
        with home.store() as store:
            source = ViewSource(store, home=home.path, clock=lambda: 2e9)
            first = statements(source.build, store)  # the queue decoded, its estimates made
            again = statements(source.build, store)  # the same queue: read as stored only
            counts[n] = (len(first), len(again))
            assert len(source.build().queue) == n

    assert counts[1000] == counts[10]


def tick_statements(home: Home) -> tuple[int, int, int]:
    """Statements of the daemon's first tick less the estimates it stored, of the next, and
    how many estimates the first stored."""
    from daemon.probes.host_reading import HostReading
    from daemon.scheduling.loop import Daemon

    with home.store() as store:
        daemon = Daemon(home, store, home.config(), ScriptedLauncher(),
                        probe=lambda: HostReading(0.0, (1.0, 1.0, 1.0), (), True))
        daemon.start()
        try:
            # The first tick stores each queued run's first estimate, one row each in one
            # write, and launches the head; the next walks the queue again (the head became
            # active) and stores none.
            first = statements(lambda: daemon.tick(now=1000.0), store)
            stored = len(store.estimates())
            again = statements(lambda: daemon.tick(now=1005.0), store)
            assert daemon._estimates.walks == 2
        finally:
            daemon.close()
    return len(first) - stored, len(again), stored


def test_a_daemon_tick_reads_the_store_as_often_for_a_thousand_queued_runs_as_for_ten(tmp_path):
    counts = {n: tick_statements(sweep_home(tmp_path / f"home-{n}", n)) for n in SIZES}

    assert [counts[n][2] for n in SIZES] == [n - len(range(7, n, 50)) for n in SIZES]  # unheld
    assert counts[1000][:2] == counts[10][:2]


def test_an_estimates_basis_names_the_runs_just_ahead_and_counts_the_others(store):
    finished_baseline(store)
    runs = [store.add_run(validate({"cards": 1, "resident": 0, "steps": 100, "seq_len": 64,
                                    "accum": 2})) for _ in range(40)]

    estimates = queue_estimates(store, now=1000.0)
    last = estimates[-1].basis

    assert all(f"run {r}: 100 steps" in last for r in runs[-1 - AHEAD_NAMED:-1])
    assert f"run {runs[-2 - AHEAD_NAMED]}:" not in last
    assert f"{len(runs) - 1 - AHEAD_NAMED} queued runs before those below" in last
    # As many clauses as the first run with one run summed ahead of it: bounded.
    assert last.count("; ") == estimates[AHEAD_NAMED + 1].basis.count("; ")


def test_a_queued_runs_place_is_counted_in_queue_order(store):
    low = store.add_run(validate({"cards": 1, "resident": 0}))
    high = [store.add_run(validate({"cards": 1, "resident": 0}), priority=5) for _ in range(3)]
    held = store.add_run(validate({"cards": 1, "resident": 0}), priority=5)
    store.set_held(held, True)
    store.move(high[2], -2)
    store.request_cancel(low)
    last = store.add_run(validate({"cards": 1, "resident": 0}))

    queue = [r["id"] for r in store.queue()]

    assert [store.queue_position(r) for r in queue] == list(range(1, len(queue) + 1))
    assert queue[-1] == last and store.queue_position(low) is None  # cancelled: not queued


@pytest.mark.parametrize("command", [["submit", "--cards", "1", "--resident", "0"],
                                     ["clone", "LAST"]])
def test_submit_and_clone_give_the_new_runs_place_without_reading_the_queue(tmp_path, monkeypatch,
                                                                           command):
    from daemon.store import connection

    home = sweep_home(tmp_path / "home", 1000)
    decoded, decode = [], connection._decode
    monkeypatch.setattr(connection, "_decode", lambda row: decoded.append(row) or decode(row))

    count = cli_statements(home, *[str(1001) if a == "LAST" else a for a in command])

    assert count > 0 and len(decoded) <= 5  # the new run and the runs it names, not the queue
