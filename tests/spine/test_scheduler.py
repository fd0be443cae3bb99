import pytest

from daemon.errors import DaemonAlreadyRunning, LaunchError
from daemon.gates.rules import ClusterReading
from daemon.launchers.base import REQUEUE, Outcome
from daemon.probes.host_reading import HostReading
from daemon.scheduling.loop import Daemon
from daemon.store import RUNNING
from trainer import records

CONFIG = {"cards": 1, "resident": 0, "steps": 5}


class ScriptedLauncher:
    """A launcher whose runs end when the test says so."""

    name = "scripted"

    def __init__(self):
        self.launched, self.cancelled, self.abandoned = [], [], []
        self.outcomes = {}
        self.fail_launch = False
        self.follow_error: Exception | None = None
        self.recover_error: Exception | None = None

    def cluster_reading(self, run):
        return ClusterReading()

    def own_pids(self):
        return set()

    def launch(self, run):
        if self.fail_launch:
            raise LaunchError("no python")
        self.launched.append(run["id"])

    def follow(self, run):
        if self.follow_error is not None:
            raise self.follow_error
        return self.outcomes.pop(run["id"], None)

    def cancel(self, run):
        self.cancelled.append(run["id"])
        self.outcomes[run["id"]] = Outcome("cancelled", "cancelled by request")

    def recover(self, run):
        if self.recover_error is not None:
            raise self.recover_error
        return Outcome(REQUEUE, "lost")

    def abandon(self, run):
        self.abandoned.append(run["id"])

    def startup(self):
        pass

    def close(self):
        pass


@pytest.fixture
def load():
    return {"value": 1.0}


@pytest.fixture
def daemon(home, store, load):
    config = home.config()
    reading = lambda: HostReading(0.0, (load["value"], 1.0, 1.0), (), True)
    d = Daemon(home, store, config, ScriptedLauncher(), probe=reading)
    d.start()
    yield d
    d.close()


def test_an_empty_queue_is_idle(daemon):
    assert daemon.tick(now=1.0).idle


def test_the_head_of_the_queue_launches_when_the_gates_pass(daemon, store):
    run = store.add_run(CONFIG)
    assert daemon.tick(now=1.0).launched == run
    assert store.gate_checks(run_id=run)[-1]["passed"] == 1


def test_high_load_blocks_and_the_blocked_check_is_stored(daemon, store, load):
    load["value"] = 200.0
    run = store.add_run(CONFIG)
    assert daemon.tick(now=1.0).launched is None
    check = store.gate_checks(run_id=run)[-1]
    assert not check["passed"]
    assert [g["verdict"] for g in check["gates"] if g["name"] == "host_load"] == ["fail"]


def test_gates_must_pass_k_ticks_in_a_row(daemon, store, load):
    daemon.config.gates.consecutive = 2
    store.add_run(CONFIG)
    assert daemon.tick(now=1.0).launched is None
    load["value"] = 200.0
    daemon.tick(now=2.0)
    load["value"] = 1.0
    assert daemon.tick(now=3.0).launched is None
    assert daemon.tick(now=4.0).launched is not None


def test_never_two_runs_at_once(daemon, store):
    a, b = store.add_run(CONFIG), store.add_run(CONFIG)
    daemon.tick(now=1.0)
    store.update_run(a, status=RUNNING)
    assert daemon.tick(now=2.0).launched is None
    daemon.launcher.outcomes[a] = Outcome("done")
    result = daemon.tick(now=3.0)
    assert (result.finished, result.launched) == ((a, "done"), b)


def test_a_cancel_request_reaches_the_launcher_once(daemon, store):
    run = store.add_run(CONFIG)
    daemon.tick(now=1.0)
    store.request_cancel(run)
    daemon.tick(now=2.0)
    assert daemon.launcher.cancelled == [run]
    assert store.run(run)["status"] == "cancelled"


def test_a_launch_that_fails_ends_the_run_with_the_reason(daemon, store):
    daemon.launcher.fail_launch = True
    run = store.add_run(CONFIG)
    daemon.tick(now=1.0)
    assert store.run(run)["status"] == "failed"
    assert store.run(run)["exit_reason"] == "no python"


def test_a_requeued_run_goes_back_to_the_queue(daemon, store):
    run = store.add_run(CONFIG)
    daemon.tick(now=1.0)
    daemon.launcher.outcomes[run] = Outcome(REQUEUE, "image pull")
    assert daemon.tick(now=2.0).launched == run
    assert store.run(run)["attempts"] == 2
    assert [e["message"] for e in store.events(run_id=run, kinds=["requeue"])] == ["image pull"]


def test_a_second_daemon_on_the_same_home_is_refused_with_the_first_ones_pid(daemon, home,
                                                                              store):
    import os

    other = Daemon(home, store, home.config(), ScriptedLauncher())
    with pytest.raises(DaemonAlreadyRunning, match=f"pid {os.getpid()}"):
        other.start()


def test_the_heartbeat_is_stored_every_tick(daemon, store):
    daemon.tick(now=42.0)
    assert store.daemon_state()["heartbeat"] == 42.0


def test_a_tick_that_fails_is_stored_as_an_event_and_the_loop_goes_on(home, store):
    ticks = []

    def probe():
        ticks.append(1)
        if len(ticks) == 1:
            raise OSError("proc unreadable")
        return HostReading(0.0, (1.0, 1.0, 1.0), (), True)

    config = home.config()
    config.daemon.tick = 0.01
    d = Daemon(home, store, config, ScriptedLauncher(), probe=probe, exit_when_idle=True)
    d.run()
    assert len(ticks) == 2
    assert "proc unreadable" in store.events(kinds=["error"])[0]["message"]
    assert store.daemon_state()["stop_reason"].startswith("idle")


# === one run can never hold the queue hostage ===


def test_a_run_whose_follow_fails_k_ticks_in_a_row_is_failed_and_the_next_run_launches(
        daemon, store):
    assert daemon.config.daemon.follow_failures == 5  # the default
    a, b = store.add_run(CONFIG), store.add_run(CONFIG)
    daemon.tick(now=1.0)
    daemon.launcher.follow_error = OverflowError("Python int too large to convert")
    for t in range(2, 6):
        assert daemon.tick(now=float(t)).launched is None
        assert store.run(a)["status"] == "launching"
    result = daemon.tick(now=6.0)
    assert (result.finished, result.launched) == ((a, "failed"), b)  # the queue moves on
    assert daemon.launcher.abandoned == [a]
    assert "5 ticks in a row" in store.run(a)["exit_reason"]
    assert "OverflowError" in store.run(a)["exit_reason"]
    assert len(store.events(run_id=a, kinds=["follow_failed"])) == 5


def test_a_follow_that_recovers_before_k_failures_starts_the_count_again(daemon, store):
    run = store.add_run(CONFIG)
    daemon.tick(now=1.0)
    for t in range(2, 30):
        # four failures, one success, and so on: never five in a row
        daemon.launcher.follow_error = None if t % 5 == 0 else ValueError("flaky")
        daemon.tick(now=float(t))
    assert store.run(run)["status"] == "launching"
    assert daemon.launcher.abandoned == []


def test_k_comes_from_config_toml(home, store):
    home.config_path.write_text("[daemon]\nfollow_failures = 2\n")
    config = home.config()
    launcher = ScriptedLauncher()
    d = Daemon(home, store, config, launcher,
               probe=lambda: HostReading(0.0, (1.0, 1.0, 1.0), (), True))
    d.start()
    try:
        run = store.add_run(CONFIG)
        d.tick(now=1.0)
        launcher.follow_error = RuntimeError("no")
        d.tick(now=2.0)
        assert d.tick(now=3.0).finished == (run, "failed")
    finally:
        d.close()


def test_a_restart_whose_recovery_raises_starts_and_the_run_is_failed_after_k_ticks(
        home, store):
    run = store.add_run(CONFIG)
    store.update_run(run, status=RUNNING)
    launcher = ScriptedLauncher()
    launcher.recover_error = launcher.follow_error = UnicodeEncodeError(
        "utf-8", "\ud800", 0, 1, "surrogates not allowed")
    d = Daemon(home, store, home.config(), launcher,
               probe=lambda: HostReading(0.0, (1.0, 1.0, 1.0), (), True))
    d.start()  # a traceback here, before: the daemon could not start at all
    try:
        for t in range(1, 6):
            d.tick(now=float(t))
    finally:
        d.close()
    assert store.run(run)["status"] == "failed"
    assert "surrogates not allowed" in store.run(run)["exit_reason"]


def test_a_run_that_ends_is_sealed_so_its_numbers_are_read_in_one_row(daemon, store):
    run = store.add_run(CONFIG)
    daemon.tick(now=1.0)
    store.add_steps(run, [records.Step("main", k, 2.0, 0.1 * k, 64, 1e-3, time=float(k))
                          for k in range(1, 11)])
    daemon.launcher.outcomes[run] = Outcome("done")
    daemon.tick(now=2.0)
    sealed = store.sealed_aggregates(run)["pass:main"]
    assert (sealed["steps"], sealed["median_step_s"]) == (10, 0.1 * 8)


def test_a_starting_daemon_seals_finished_runs_a_store_left_unsealed(home, store):
    run = store.add_run(CONFIG)
    store.add_steps(run, [records.Step("main", k, 2.0, 0.1, 64, 1e-3, time=float(k))
                          for k in range(1, 11)])
    store.finish_run(run, "done", now=5.0)
    assert store.unsealed_runs(10) == [run]
    d = Daemon(home, store, home.config(), ScriptedLauncher(),
               probe=lambda: HostReading(0.0, (1.0, 1.0, 1.0), (), True))
    d.start()
    try:
        d.tick(now=10.0)  # one run sealed per tick, after the first heartbeat
    finally:
        d.close()
    assert store.unsealed_runs(10) == []
    assert store.sealed_aggregates(run)["pass:main"]["steps"] == 10
