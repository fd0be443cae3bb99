"""Fixtures of the tracker tests (tracker_support.py has the rest); ``home``, ``store`` and
``rngdctl`` come from tests/conftest.py."""

from __future__ import annotations

import pytest

from daemon.store import DONE
from tests.trackers.tracker_support import (
    T0,
    FeedingLauncher,
    MlflowServer,
    eval_line,
    free_port,
    passes,
    start_lines,
)
from trainer import records


@pytest.fixture
def tracked_run(store):
    """add(steps=20, status=DONE, name="chat") -> run id: a run launched with a baseline,
    ``steps`` steps of each pass, held-out losses at steps 0, 10 and 20 (those it reached),
    ended ``status`` (None: still running)."""
    from daemon.run.ingest import Ingest

    def add(steps: int = 20, *, status: str | None = DONE, name: str | None = "chat") -> int:
        run_id = store.add_run({"backend": "cpu", "cards": 2, "resident": 8, "steps": steps,
                                "lr": 1e-5, "model": "tiny-llama", "lora": None,
                                "baseline": True}, name=name, now=T0)
        store.update_run(run_id, status="running", launcher="local", started=T0 + 2)
        baseline, main = passes(steps)
        lines = start_lines(baseline) + [records.dumps(s) for s in baseline]
        lines += start_lines(main) + [records.dumps(s) for s in main]
        lines += [eval_line(k, 2.5 - k / 100) for k in (0, 10, 20) if k <= steps]
        Ingest(store).feed(run_id, lines)
        if status is not None:
            store.finish_run(run_id, status, now=T0 + 500)
        return run_id

    return add


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """One MLflow server for the session's tests (it takes seconds to start)."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"), free_port()).start()
    yield server
    server.stop()


@pytest.fixture
def start_daemon(home, store):
    """start(trackers={...}, clock=...) -> the real Daemon over a FeedingLauncher on an idle
    host, [trackers] set as given, its trackers' thread started; closed after the test."""
    from daemon.home import TrackersConfig
    from daemon.probes.host_reading import HostReading
    from daemon.scheduling.loop import Daemon

    started = []

    def start(trackers: dict, **kwargs):
        config = home.config()
        config.trackers = TrackersConfig(**trackers)
        d = Daemon(home, store, config, FeedingLauncher(store),
                   probe=lambda: HostReading(0.0, (1.0, 1.0, 1.0), (), True), **kwargs)
        d.start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.close()
