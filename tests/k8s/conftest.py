"""Fixtures for the Kubernetes launcher: kmock's emulator over HTTP, the real client."""

from __future__ import annotations

import pytest
from k8s_emulator import NODE, NS, Cluster

from daemon.home import Config

IMAGE = "registry.example/furiosa-llm:2026.1"


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    emu = Cluster(tmp_path)
    emu.add_node(NODE, cards=8, images=[IMAGE])
    monkeypatch.setenv("KUBECONFIG", str(emu.kubeconfig))
    yield emu
    emu.close()


@pytest.fixture
def config():
    config = Config()
    config.k8s.namespace = NS
    config.k8s.node = NODE
    config.k8s.image = IMAGE
    config.k8s.retries = 2
    config.k8s.retry_backoff = 0.01
    config.k8s.request_timeout = 0.5
    config.k8s.ttl_seconds = 600
    return config


@pytest.fixture
def proc(tmp_path):
    """An empty /proc: no process holds a device unless a test puts one there."""
    path = tmp_path / "proc"
    path.mkdir()
    return path


@pytest.fixture
def launcher(cluster, home, store, config, proc):
    from daemon.ingest import Ingest
    from daemon.launchers.k8s import K8sLauncher

    k8s = K8sLauncher(home=home, store=store, config=config, ingest=Ingest(store),
                      proc=str(proc))
    yield k8s
    k8s.close()


@pytest.fixture
def submit(store):
    """Queue a run: submit(cards=2, steps=5, ...) -> the run id."""
    from daemon.runspec import validate

    def add(**options):
        options = {"cards": 2, "resident": 4, "steps": 5, **options}
        return store.add_run(validate(options), name=options.get("name"))

    return add


def start_line(run_id: int) -> str:
    from trainer import records

    return records.dumps(records.Start(config_label="main", config={"cards": 2},
                                       run_id=str(run_id), versions={"torch": "2.13.0"},
                                       git="abc123", host="pod", time=1000.0))


def step_line(step: int, loss: float = 2.0) -> str:
    from trainer import records

    return records.dumps(records.Step(config_label="main", step=step, loss=loss, step_s=1.5,
                                      tokens=1024, lr=1e-5, time=1000.0 + step))


def end_line(status: str = "ok", error: str | None = None) -> str:
    from trainer import records

    return records.dumps(records.End(status=status, error=error, time=2000.0))


@pytest.fixture
def running(cluster, launcher, store, submit):
    """A run the scheduler has claimed and launched: (run id, its Job's name)."""

    def launch(**options):
        run_id = submit(**options)
        assert store.claim_for_launch(run_id, launcher="k8s")
        launcher.launch(store.run(run_id))
        return run_id, store.run(run_id)["job_name"]

    return launch
