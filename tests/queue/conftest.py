"""Fixtures of the queue tests (issue 14); ``home``, ``store`` and ``rngdctl`` are global."""

from __future__ import annotations

import pytest

from daemon.gates.rules import ClusterReading
from daemon.launchers.base import REQUEUE, Outcome


class ScriptedLauncher:
    """A launcher whose runs end when the test says so (``outcomes[run_id] = Outcome``)."""

    name = "scripted"

    def __init__(self):
        self.launched, self.cancelled = [], []
        self.outcomes = {}

    def cluster_reading(self, run):
        return ClusterReading()

    def own_pids(self):
        return set()

    def launch(self, run):
        self.launched.append(run["id"])

    def follow(self, run):
        return self.outcomes.pop(run["id"], None)

    def cancel(self, run):
        self.cancelled.append(run["id"])
        self.outcomes[run["id"]] = Outcome("cancelled", "cancelled by request")

    def recover(self, run):
        return Outcome(REQUEUE, "lost")

    def startup(self):
        pass

    def close(self):
        pass


@pytest.fixture
def daemon(home, store):
    """The real scheduler over a scripted launcher on an idle host; tick(now=...) drives it."""
    from daemon.probes.host_reading import HostReading
    from daemon.scheduling.loop import Daemon

    d = Daemon(home, store, home.config(), ScriptedLauncher(),
               probe=lambda: HostReading(0.0, (1.0, 1.0, 1.0), (), True))
    d.start()
    yield d
    d.close()


@pytest.fixture
def cli(home):
    """The CLI in-process (CliRunner): cli("runs", "--json") -> click's Result."""
    from click.testing import CliRunner

    from rngdctl.cli import cli as group

    def invoke(*args):
        return CliRunner().invoke(group, ["--home", str(home.path), *args])

    return invoke


@pytest.fixture
def start_daemon(home, store):
    """Start real schedulers on the home's store, closed at the end of the test:
    start_daemon(config, launcher, probe, **Daemon keywords)."""
    from daemon.scheduling.loop import Daemon

    started = []

    def start(config, launcher, probe, **kwargs):
        home.ensure()
        d = Daemon(home, store, config, launcher, probe=probe, **kwargs)
        d.start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.close()
