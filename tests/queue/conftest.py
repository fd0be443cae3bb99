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


def finished_baseline(store, *, step_s=0.01, n=20):
    """A done tiny-llama run whose main pass ran all-offload: a baseline for the model."""
    from daemon.run.ingest import Ingest
    from daemon.run.spec import validate
    from trainer import records

    run = store.add_run(validate({"cards": 1, "resident": 0, "steps": n, "seq_len": 64,
                                  "accum": 2}))
    phases = {"fwd_bwd": step_s * 0.6, "upload": step_s * 0.1, "download": step_s * 0.1,
              "host_optim": step_s * 0.1, "device_optim": step_s * 0.05, "wait": 0.0}
    extra = {"layers": 4, "cards": 1, "resident_per_card": 0, "resident_layers": 0,
             "seq_len": 64, "accum": 2, "micro_batch": 1, "params_per_layer": 46_208}
    Ingest(store).feed(run, [records.dumps(records.Start(
        config_label="main", time=0.0, config={"backend": "cpu", "cards": 1, "layers": 4,
                                               "resident_layers": 0, "seq_len": 64,
                                               "accum": 2, "micro_batch": 1}))]
        + [records.dumps(records.Step(config_label="main", step=k, loss=4.0, step_s=step_s,
                                      tokens=128, lr=1e-5, phases=phases, time=float(k),
                                      extra=extra)) for k in range(1, n + 1)])
    store.update_run(run, started=100.0)
    store.finish_run(run, "done", now=100.0 + n * step_s + 5.0)  # 5 s beyond its steps
    return run
